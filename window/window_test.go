package window

import (
	"errors"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatalf("ParseRule(%q): %v", s, err)
	}
	return r
}

func TestRecurringContains(t *testing.T) {
	// Saturday 2026-11-21 02:00 UTC, 4 h, weekends.
	weekend := Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;BYDAY=SA,SU")}
	// A 48 h window from Saturday 00:00, every other week.
	long := Recurring{Start: at("2026-11-21T00:00:00Z"), Duration: 48 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;INTERVAL=2;BYDAY=SA")}
	daily := Recurring{Start: at("2026-11-01T22:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "RRULE:FREQ=DAILY")}
	firstSat := Recurring{Start: at("2026-01-03T01:00:00Z"), Duration: 6 * time.Hour, Rule: mustRule(t, "FREQ=MONTHLY;BYDAY=1SA")}
	lastDay := Recurring{Start: at("2026-01-31T20:00:00Z"), Duration: 2 * time.Hour, Rule: mustRule(t, "FREQ=MONTHLY;BYMONTHDAY=-1")}
	twice := Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: time.Hour, Rule: mustRule(t, "FREQ=DAILY;COUNT=2")}
	until := Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: time.Hour, Rule: mustRule(t, "FREQ=DAILY;UNTIL=20261122T235959Z")}
	once := Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: time.Hour}

	tests := []struct {
		name string
		w    Recurring
		t    string
		want bool
	}{
		{"weekend: Saturday inside", weekend, "2026-11-21T03:00:00Z", true},
		{"weekend: Saturday at the end", weekend, "2026-11-21T06:00:00Z", false},
		{"weekend: Sunday inside", weekend, "2026-11-22T05:59:59Z", true},
		{"weekend: Monday", weekend, "2026-11-23T03:00:00Z", false},
		{"weekend: before the start", weekend, "2026-11-14T03:00:00Z", false},
		{"weekend: a later Saturday", weekend, "2027-03-06T02:00:00Z", true},
		{"48 h: Sunday night reaches back to Saturday", long, "2026-11-22T23:00:00Z", true},
		{"48 h: Monday", long, "2026-11-23T00:00:00Z", false},
		{"48 h: the off week", long, "2026-11-29T12:00:00Z", false},
		{"48 h: two weeks on", long, "2026-12-06T12:00:00Z", true},
		{"daily across midnight", daily, "2026-11-22T01:30:00Z", true},
		{"daily in the afternoon", daily, "2026-11-22T15:00:00Z", false},
		{"first Saturday of December", firstSat, "2026-12-05T03:00:00Z", true},
		{"second Saturday of December", firstSat, "2026-12-12T03:00:00Z", false},
		{"last day of February", lastDay, "2026-02-28T21:00:00Z", true},
		{"the 30th of April is the last", lastDay, "2026-04-30T20:30:00Z", true},
		{"the 30th of May is not", lastDay, "2026-05-30T20:30:00Z", false},
		{"COUNT=2: second", twice, "2026-11-22T02:30:00Z", true},
		{"COUNT=2: third", twice, "2026-11-23T02:30:00Z", false},
		{"UNTIL: before", until, "2026-11-22T02:30:00Z", true},
		{"UNTIL: after", until, "2026-11-23T02:30:00Z", false},
		{"once: inside", once, "2026-11-21T02:30:00Z", true},
		{"once: a day later", once, "2026-11-22T02:30:00Z", false},
	}
	for _, tc := range tests {
		if got := tc.w.Contains(at(tc.t)); got != tc.want {
			t.Errorf("%s: Contains(%s) = %t, want %t", tc.name, tc.t, got, tc.want)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, s := range []string{
		"", "FREQ=HOURLY", "BYDAY=SA", "FREQ=WEEKLY;BYDAY=XX", "FREQ=WEEKLY;BYDAY=1SA", "FREQ=DAILY;BYDAY=MO",
		"FREQ=WEEKLY;INTERVAL=0", "FREQ=WEEKLY;FREQ=DAILY", "FREQ=WEEKLY;BYHOUR=3", "FREQ=MONTHLY;BYMONTHDAY=32",
		"FREQ=DAILY;COUNT=2;UNTIL=20261231", "FREQ=DAILY;UNTIL=tomorrow", "FREQ=WEEKLY;BYDAY", "FREQ=WEEKLY;BYMONTHDAY=1",
		"FREQ=MONTHLY;BYDAY=6SA",
	} {
		if _, err := ParseRule(s); !errors.Is(err, ErrRule) {
			t.Errorf("ParseRule(%q) = %v, want ErrRule", s, err)
		}
	}
}

func TestPolicyBlocks(t *testing.T) {
	p := Policy{
		Window:     &Recurring{Start: at("2026-11-21T00:00:00Z"), Duration: 48 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;BYDAY=SA"), Recurrence: "FREQ=WEEKLY;BYDAY=SA"},
		Exclusions: []Exclusion{{Name: "freeze", Start: at("2026-11-28T00:00:00Z"), End: at("2026-11-30T00:00:00Z")}},
	}
	for _, tc := range []struct{ t, want string }{
		{"2026-11-21T10:00:00Z", ""},
		{"2026-11-24T10:00:00Z", ReasonOutsideWindow},
		{"2026-11-28T10:00:00Z", ReasonExcluded}, // in the window, but excluded: the exclusion wins
	} {
		if got, detail := p.Blocks(at(tc.t)); got != tc.want {
			t.Errorf("Blocks(%s) = %q (%s), want %q", tc.t, got, detail, tc.want)
		}
	}
	if got, _ := (Policy{}).Blocks(at("2026-11-24T10:00:00Z")); got != "" {
		t.Errorf("an empty policy blocks: %s", got)
	}
}
