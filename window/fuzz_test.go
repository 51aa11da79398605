package window

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParseRule: an RRULE that parses writes back (Rule.String) as one
// that parses to the same rule; one that does not is an ErrRule. Each
// rule found is also asked whether it holds a moment, as a pass does.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"FREQ=WEEKLY;BYDAY=SA,SU", "RRULE:FREQ=DAILY", "FREQ=MONTHLY;BYDAY=1SA", "FREQ=MONTHLY;BYDAY=-1SU",
		"FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=-1", "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", "FREQ=DAILY;INTERVAL=3;COUNT=10",
		"FREQ=WEEKLY;UNTIL=20261231;WKST=SU", "FREQ=YEARLY;BYYEARDAY=100,-1", "FREQ=DAILY;UNTIL=20261231T235959Z",
		"FREQ=HOURLY", "", "FREQ=WEEKLY;BYMONTHDAY=1", "BYDAY=SA", "FREQ=DAILY;COUNT=0", "freq=weekly;byday=sa",
	} {
		f.Add(s)
	}
	start := time.Date(2026, 1, 3, 2, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !errors.Is(err, ErrRule) {
				t.Errorf("ParseRule(%q): %v, not an ErrRule", s, err)
			}
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || !cmp.Equal(r, again, cmpopts.EquateEmpty()) {
			t.Errorf("ParseRule(%q) writes as %q, which reads as %+v, %v; want %+v", s, r.String(), again, err, r)
		}
		w := Recurring{Start: start, Duration: 4 * time.Hour, Rule: r}
		w.Contains(time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC))
	})
}

// FuzzParseScope: a scope that parses is one of the three.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"", "no_upgrades", "NO_MINOR_UPGRADES", "no_minor_or_node_upgrades", "all"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err == nil && sc != NoUpgrades && sc != NoMinorUpgrades && sc != NoMinorOrNodeUpgrades {
			t.Errorf("ParseScope(%q) = %q", s, sc)
		}
	})
}

// TestCountEndsTheWindow: a window with a COUNT, its end worked out once
// (Resolve), holds exactly COUNT occurrences, the last of them at the end
// it worked out, and nothing after.
func TestCountEndsTheWindow(t *testing.T) {
	start := time.Date(2026, 1, 3, 2, 0, 0, 0, time.UTC)
	for _, rule := range []string{"FREQ=DAILY;COUNT=10", "FREQ=WEEKLY;BYDAY=SA,SU;COUNT=7", "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;COUNT=3",
		"FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;COUNT=2", "FREQ=DAILY;INTERVAL=3;COUNT=1"} {
		r, err := ParseRule(rule)
		if err != nil {
			t.Fatal(err)
		}
		w := Recurring{Start: start, Duration: 4 * time.Hour, Rule: r}
		w.Resolve()
		var inside []time.Time
		// An hour into each day's possible occurrence, and 12 hours after.
		for at := start.Add(-23 * time.Hour); at.Before(start.AddDate(7, 0, 0)); at = at.Add(12 * time.Hour) {
			if w.Contains(at) {
				inside = append(inside, at)
			}
		}
		if len(inside) != r.Count || len(inside) > 0 && !inside[len(inside)-1].Equal(w.lastStart.Add(time.Hour)) {
			t.Errorf("%s: inside at %v, want %d moments, the last an hour after %s", rule, inside, r.Count, w.lastStart)
		}
	}
}
