package window

import (
	"fmt"
	"time"
)

// Recurring is a maintenance window: from Start for Duration, repeated by
// Rule (a zero Rule means once).
type Recurring struct {
	Start    time.Time
	Duration time.Duration
	Rule     Rule
	// Recurrence is the RRULE as written, for messages.
	Recurrence string
}

// Contains reports whether t is inside an occurrence of w.
func (w Recurring) Contains(t time.Time) bool {
	t = t.UTC()
	start := w.Start.UTC()
	if t.Before(start) || w.Duration <= 0 {
		return false
	}
	if w.Rule.Freq == "" {
		return t.Before(start.Add(w.Duration))
	}
	timeOfDay := start.Sub(civilDay(start))
	// An occurrence containing t started on t's day or on one of the days
	// before it that the window's duration reaches back to.
	earliest := civilDay(t.Add(-w.Duration))
	for day := civilDay(t); !day.Before(earliest); day = day.AddDate(0, 0, -1) {
		occ := day.Add(timeOfDay)
		if occ.After(t) || !t.Before(occ.Add(w.Duration)) || !w.Rule.matchesDay(start, occ) {
			continue
		}
		if !w.Rule.Until.IsZero() && occ.After(w.Rule.Until) {
			continue
		}
		if w.Rule.Count > 0 && w.index(occ) >= w.Rule.Count {
			continue
		}
		return true
	}
	return false
}

// index is how many occurrences start before occ.
func (w Recurring) index(occ time.Time) int {
	start := w.Start.UTC()
	timeOfDay := start.Sub(civilDay(start))
	n := 0
	for day := civilDay(start); day.Add(timeOfDay).Before(occ); day = day.AddDate(0, 0, 1) {
		if w.Rule.matchesDay(start, day.Add(timeOfDay)) {
			n++
		}
	}
	return n
}

func (w Recurring) String() string {
	s := fmt.Sprintf("%s for %s", w.Start.UTC().Format(time.RFC3339), w.Duration)
	if w.Recurrence != "" {
		s += ", " + w.Recurrence
	}
	return s
}

// Exclusion is a one-off period in which this project starts no
// maintenance.
type Exclusion struct {
	Name       string
	Start, End time.Time
}

// Contains reports whether t is in [Start, End).
func (e Exclusion) Contains(t time.Time) bool {
	return !t.Before(e.Start) && t.Before(e.End)
}

// MaxExclusions is how many exclusions one scope may have (as in GKE).
const MaxExclusions = 20

// Policy is one scope's maintenance window (nil: any time) and exclusions.
type Policy struct {
	Window     *Recurring
	Exclusions []Exclusion
}

// Reasons a Policy blocks a moment.
const (
	ReasonExcluded      = "excluded"
	ReasonOutsideWindow = "outside_window"
)

// Blocks reports why p blocks t ("" if it does not): an exclusion first,
// then the window; detail says which.
func (p Policy) Blocks(t time.Time) (reason, detail string) {
	for _, e := range p.Exclusions {
		if e.Contains(t) {
			return ReasonExcluded, fmt.Sprintf("inside the maintenance exclusion %q (%s to %s)", e.Name,
				e.Start.UTC().Format(time.RFC3339), e.End.UTC().Format(time.RFC3339))
		}
	}
	if p.Window != nil && !p.Window.Contains(t) {
		return ReasonOutsideWindow, "outside the maintenance window (" + p.Window.String() + ")"
	}
	return "", ""
}
