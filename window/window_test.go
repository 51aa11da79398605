package window

import (
	"errors"
	"strings"
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
	// Rules GKE accepts beyond the common ones.
	lastWeekday := Recurring{Start: at("2026-01-30T22:00:00Z"), Duration: 2 * time.Hour, Rule: mustRule(t, "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1")}
	firstSatPos := Recurring{Start: at("2026-01-03T01:00:00Z"), Duration: 6 * time.Hour, Rule: mustRule(t, "FREQ=MONTHLY;BYDAY=SA;BYSETPOS=1")}
	weekNights := Recurring{Start: at("2026-11-02T22:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=DAILY;BYDAY=MO,TU,WE,TH,FR")}
	lastFridayOfYear := Recurring{Start: at("2025-12-26T02:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=YEARLY;BYMONTH=12;BYDAY=-1FR")}
	yearly := Recurring{Start: at("2026-03-01T00:00:00Z"), Duration: 24 * time.Hour, Rule: mustRule(t, "FREQ=YEARLY")}
	newYearsEve := Recurring{Start: at("2025-12-31T00:00:00Z"), Duration: 24 * time.Hour, Rule: mustRule(t, "FREQ=YEARLY;BYYEARDAY=-1")}
	saturdayOnly := Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;BYDAY=SA,SU;BYSETPOS=1")}

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
		{"last weekday: Monday the 30th of November", lastWeekday, "2026-11-30T23:00:00Z", true},
		{"last weekday: Friday the 27th is not", lastWeekday, "2026-11-27T23:00:00Z", false},
		{"last weekday: Thursday the 31st of December", lastWeekday, "2026-12-31T22:30:00Z", true},
		{"BYSETPOS=1 of Saturdays: the 5th of December", firstSatPos, "2026-12-05T03:00:00Z", true},
		{"BYSETPOS=1 of Saturdays: the 12th is not", firstSatPos, "2026-12-12T03:00:00Z", false},
		{"DAILY with BYDAY: Monday night", weekNights, "2026-11-24T01:00:00Z", true},
		{"DAILY with BYDAY: Saturday night", weekNights, "2026-11-21T23:00:00Z", false},
		{"last Friday of December", lastFridayOfYear, "2026-12-25T03:00:00Z", true},
		{"the Friday before it", lastFridayOfYear, "2026-12-18T03:00:00Z", false},
		{"YEARLY: the 1st of March a year on", yearly, "2027-03-01T12:00:00Z", true},
		{"YEARLY: the 2nd of March", yearly, "2027-03-02T12:00:00Z", false},
		{"BYYEARDAY=-1: New Year's Eve", newYearsEve, "2026-12-31T12:00:00Z", true},
		{"BYYEARDAY=-1: the day before", newYearsEve, "2026-12-30T12:00:00Z", false},
		{"weekends, first of each week: Saturday", saturdayOnly, "2026-11-28T03:00:00Z", true},
		{"weekends, first of each week: not Sunday", saturdayOnly, "2026-11-29T03:00:00Z", false},
	}
	for _, tc := range tests {
		if got := tc.w.Contains(at(tc.t)); got != tc.want {
			t.Errorf("%s: Contains(%s) = %t, want %t", tc.name, tc.t, got, tc.want)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, s := range []string{
		"", "FREQ=HOURLY", "BYDAY=SA", "FREQ=WEEKLY;BYDAY=XX", "FREQ=WEEKLY;BYDAY=1SA", "FREQ=DAILY;BYDAY=1MO",
		"FREQ=WEEKLY;INTERVAL=0", "FREQ=WEEKLY;FREQ=DAILY", "FREQ=WEEKLY;BYHOUR=3", "FREQ=MONTHLY;BYMONTHDAY=32",
		"FREQ=DAILY;COUNT=2;UNTIL=20261231", "FREQ=DAILY;UNTIL=tomorrow", "FREQ=WEEKLY;BYDAY", "FREQ=WEEKLY;BYMONTHDAY=1",
		"FREQ=MONTHLY;BYDAY=6SA", "FREQ=YEARLY;BYMONTH=3;BYDAY=6SA", "FREQ=YEARLY;BYDAY=54MO", "FREQ=MONTHLY;BYYEARDAY=1",
		"FREQ=WEEKLY;BYSETPOS=1", "FREQ=MONTHLY;BYDAY=SA;BYSETPOS=0", "FREQ=MONTHLY;BYDAY=SA;BYSETPOS=400", "FREQ=YEARLY;BYMONTH=13",
		"FREQ=DAILY;BYHOUR=3", "FREQ=YEARLY;BYWEEKNO=20", "FREQ=MINUTELY",
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

func TestExclusionScopes(t *testing.T) {
	in := at("2026-12-01T12:00:00Z")
	excl := func(scope Scope) Policy {
		return Policy{Exclusions: []Exclusion{{Name: "x", Start: at("2026-12-01T00:00:00Z"), End: at("2026-12-02T00:00:00Z"), Scope: scope}}}
	}
	for _, tc := range []struct {
		scope Scope
		want  string
	}{
		{"", ReasonExcluded}, // GKE's default: no_upgrades
		{NoUpgrades, ReasonExcluded},
		{NoMinorOrNodeUpgrades, ReasonExcluded},
		{NoMinorUpgrades, ""}, // node maintenance may go on
	} {
		if got, _ := excl(tc.scope).Blocks(in); got != tc.want {
			t.Errorf("scope %q: Blocks = %q, want %q", tc.scope, got, tc.want)
		}
	}
	for in, want := range map[string]Scope{"": NoUpgrades, "NO_UPGRADES": NoUpgrades, "no_minor_or_node_upgrades": NoMinorOrNodeUpgrades, "No_Minor_Upgrades": NoMinorUpgrades} {
		if got, err := ParseScope(in); err != nil || got != want {
			t.Errorf("ParseScope(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseScope("no_patches"); err == nil {
		t.Error("ParseScope(no_patches) is not an error")
	}
}

func TestCheckLimits(t *testing.T) {
	day := 24 * time.Hour
	ex := func(name, start string, d time.Duration, scope Scope) Exclusion {
		return Exclusion{Name: name, Start: at(start), End: at(start).Add(d), Scope: scope}
	}
	weekly4h := &Recurring{Start: at("2026-11-21T02:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;BYDAY=SA")}
	saturdays := &Recurring{Start: at("2026-11-21T00:00:00Z"), Duration: 48 * time.Hour, Rule: mustRule(t, "FREQ=WEEKLY;BYDAY=SA")}
	daily3h := &Recurring{Start: at("2026-11-01T22:00:00Z"), Duration: 3 * time.Hour, Rule: mustRule(t, "FREQ=DAILY")}
	daily4h := &Recurring{Start: at("2026-11-01T22:00:00Z"), Duration: 4 * time.Hour, Rule: mustRule(t, "FREQ=DAILY")}
	var many []Exclusion
	for i := range 21 {
		many = append(many, ex("e", "2026-12-01T00:00:00Z", time.Duration(i+1)*time.Hour, NoMinorUpgrades))
	}
	for _, tc := range []struct {
		name string
		p    Policy
		want string // "" for none
	}{
		{"nothing", Policy{}, ""},
		{"a window alone is not held to the rule", Policy{Window: weekly4h}, ""},
		{"21 exclusions", Policy{Exclusions: many}, "at most 20"},
		{"four no_upgrades", Policy{Exclusions: []Exclusion{
			ex("a", "2026-12-01T00:00:00Z", day, ""), ex("b", "2027-01-01T00:00:00Z", day, NoUpgrades),
			ex("c", "2027-02-01T00:00:00Z", day, ""), ex("d", "2027-03-01T00:00:00Z", day, ""),
		}}, "at most 3"},
		{"three no_upgrades, and others", Policy{Exclusions: []Exclusion{
			ex("a", "2026-12-01T00:00:00Z", day, ""), ex("b", "2027-01-01T00:00:00Z", day, NoUpgrades),
			ex("c", "2027-02-01T00:00:00Z", day, ""), ex("d", "2027-03-01T00:00:00Z", 90*day, NoMinorOrNodeUpgrades),
		}}, ""},
		{"no_upgrades for 31 days", Policy{Exclusions: []Exclusion{ex("long", "2026-12-01T00:00:00Z", 31*day, "")}}, "at most 720h"},
		{"no_minor_upgrades for 90 days", Policy{Exclusions: []Exclusion{ex("long", "2026-12-01T00:00:00Z", 90*day, NoMinorUpgrades)}}, ""},
		{"15 and 16 days, one day apart", Policy{Exclusions: []Exclusion{
			ex("a", "2026-12-01T00:00:00Z", 15*day, ""), ex("b", "2026-12-17T00:00:00Z", 16*day, ""),
		}}, "leave 24h of maintenance time in the 32 days from 2026-12-01T00:00:00Z"},
		{"15 and 15 days, one day apart: 48h in 32 days", Policy{Exclusions: []Exclusion{
			ex("a", "2026-12-01T00:00:00Z", 15*day, ""), ex("b", "2026-12-17T00:00:00Z", 15*day, ""),
		}}, ""},
		{"weekly 4h window with an exclusion", Policy{Window: weekly4h, Exclusions: []Exclusion{ex("a", "2026-12-02T00:00:00Z", day, "")}},
			"the maintenance window, less the no_upgrades exclusions, leaves"},
		{"weekends and a 15-day freeze", Policy{Window: saturdays, Exclusions: []Exclusion{ex("year-end", "2026-12-20T00:00:00Z", 15*day, "")}}, ""},
		{"daily 3h: stretches under 4h do not count", Policy{Window: daily3h, Exclusions: []Exclusion{ex("a", "2026-12-02T00:00:00Z", day, "")}}, "leaves 0h"},
		{"daily 4h", Policy{Window: daily4h, Exclusions: []Exclusion{ex("a", "2026-12-02T00:00:00Z", day, "")}}, ""},
		{"daily 4h cut by an exclusion into 2h pieces", Policy{Window: daily4h, Exclusions: []Exclusion{
			ex("a", "2026-12-01T00:00:00Z", 30*day, NoUpgrades),
		}}, "leaves 4h"}, // the 2h pieces at the freeze's ends do not count
	} {
		err := tc.p.CheckLimits()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
