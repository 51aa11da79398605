package window

import (
	"fmt"
	"strings"
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
	// lastStart is countEnd, once Resolve worked it out (zero: not yet).
	lastStart time.Time
}

// Horizon is the last year Resolve looks for a COUNT's last occurrence
// in: a rule whose COUNT is not reached by then has no end before it.
const Horizon = 2200

// Resolve works out, once, when the last occurrence a COUNT allows
// starts, so that asking whether a moment is inside the window does not
// count the occurrences from the window's start each time. A window not
// resolved works it out on each question.
func (w *Recurring) Resolve() { w.lastStart = w.countEnd() }

// countEnd is when the last occurrence a COUNT allows starts (Horizon's
// first moment when the COUNT is not reached before it); zero without a
// COUNT.
func (w Recurring) countEnd() time.Time {
	if w.Rule.Freq == "" || w.Rule.Count <= 0 {
		return time.Time{}
	}
	if !w.lastStart.IsZero() {
		return w.lastStart
	}
	start := w.Start.UTC()
	timeOfDay := start.Sub(civilDay(start))
	n := 0
	for day := civilDay(start); day.Year() < Horizon; day = day.AddDate(0, 0, 1) {
		if occ := day.Add(timeOfDay); w.Rule.matchesDay(start, occ) {
			if n++; n == w.Rule.Count {
				return occ
			}
		}
	}
	return time.Date(Horizon, 1, 1, 0, 0, 0, 0, time.UTC)
}

// Contains reports whether t is inside an occurrence of w.
func (w Recurring) Contains(t time.Time) bool {
	t = t.UTC()
	if t.Before(w.Start) || w.Duration <= 0 {
		return false
	}
	timeOfDay := w.Start.UTC().Sub(civilDay(w.Start.UTC()))
	// An occurrence containing t started on t's day or on one of the days
	// before it that the window's duration reaches back to.
	earliest := civilDay(t.Add(-w.Duration))
	for day := civilDay(t); !day.Before(earliest); day = day.AddDate(0, 0, -1) {
		occ := day.Add(timeOfDay)
		if !occ.After(t) && t.Before(occ.Add(w.Duration)) && w.occursAt(occ) {
			return true
		}
	}
	return false
}

// occursAt reports whether an occurrence of w starts at occ, a moment at
// w's time of day.
func (w Recurring) occursAt(occ time.Time) bool {
	start := w.Start.UTC()
	switch {
	case occ.Before(start):
		return false
	case w.Rule.Freq == "":
		return occ.Equal(start)
	case !w.Rule.matchesDay(start, occ):
		return false
	case !w.Rule.Until.IsZero() && occ.After(w.Rule.Until):
		return false
	case w.Rule.Count > 0 && occ.After(w.countEnd()):
		return false
	}
	return true
}

func (w Recurring) String() string {
	s := fmt.Sprintf("%s for %s", w.Start.UTC().Format(time.RFC3339), w.Duration)
	if w.Recurrence != "" {
		s += ", " + w.Recurrence
	}
	return s
}

// Scope is a maintenance exclusion's scope, GKE's: what it keeps from
// happening.
type Scope string

const (
	// NoUpgrades excludes every upgrade, and node disruption: GKE's
	// default scope.
	NoUpgrades Scope = "no_upgrades"
	// NoMinorOrNodeUpgrades excludes minor and node upgrades: nodes are
	// not disrupted.
	NoMinorOrNodeUpgrades Scope = "no_minor_or_node_upgrades"
	// NoMinorUpgrades excludes minor upgrades only: node maintenance may
	// go on.
	NoMinorUpgrades Scope = "no_minor_upgrades"
)

// ParseScope reads a scope as gcloud writes it (no_upgrades) or as the
// API does (NO_UPGRADES); "" is GKE's default, NoUpgrades.
func ParseScope(s string) (Scope, error) {
	switch sc := Scope(strings.ToLower(strings.TrimSpace(s))); sc {
	case "":
		return NoUpgrades, nil
	case NoUpgrades, NoMinorOrNodeUpgrades, NoMinorUpgrades:
		return sc, nil
	}
	return "", fmt.Errorf("scope %q: want no_upgrades, no_minor_or_node_upgrades or no_minor_upgrades", s)
}

// BlocksNodes reports whether an exclusion of this scope keeps nodes from
// being disrupted, and so keeps this project from starting maintenance.
func (s Scope) BlocksNodes() bool { return s != NoMinorUpgrades }

// Exclusion is a one-off period in which this project starts no
// maintenance, if its scope blocks node disruption.
type Exclusion struct {
	Name       string
	Start, End time.Time
	Scope      Scope // "" means NoUpgrades
}

// Contains reports whether t is in [Start, End).
func (e Exclusion) Contains(t time.Time) bool {
	return !t.Before(e.Start) && t.Before(e.End)
}

func (e Exclusion) scope() Scope {
	if e.Scope == "" {
		return NoUpgrades
	}
	return e.Scope
}

// GKE's limits on a maintenance policy.
const (
	// MaxExclusions is how many exclusions one cluster may have.
	MaxExclusions = 20
	// MaxNoUpgrades is how many no_upgrades exclusions it may have.
	MaxNoUpgrades = 3
	// MaxNoUpgradesDuration is how long one no_upgrades exclusion may be.
	MaxNoUpgradesDuration = 30 * 24 * time.Hour
	// The window, less the no_upgrades exclusions, must leave at least
	// MinAvailable in any AvailabilityPeriod, counting only stretches of
	// MinStretch or more.
	AvailabilityPeriod = 32 * 24 * time.Hour
	MinAvailable       = 48 * time.Hour
	MinStretch         = 4 * time.Hour
)

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
		if e.scope().BlocksNodes() && e.Contains(t) {
			return ReasonExcluded, fmt.Sprintf("inside the maintenance exclusion %q (%s to %s)", e.Name,
				e.Start.UTC().Format(time.RFC3339), e.End.UTC().Format(time.RFC3339))
		}
	}
	if p.Window != nil && !p.Window.Contains(t) {
		return ReasonOutsideWindow, "outside the maintenance window (" + p.Window.String() + ")"
	}
	return "", ""
}
