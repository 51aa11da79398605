package window

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// CheckLimits reports every way p breaks GKE's limits on a maintenance
// policy (nil if none): at most MaxExclusions exclusions, at most
// MaxNoUpgrades of scope no_upgrades, each at most MaxNoUpgradesDuration
// long, and the window less those exclusions leaving at least MinAvailable
// of maintenance time in any AvailabilityPeriod that overlaps one of them
// (stretches of at least MinStretch count). A window alone is not held to
// that rule: it only limits what this project starts.
func (p Policy) CheckLimits() error {
	var errs []error
	if len(p.Exclusions) > MaxExclusions {
		errs = append(errs, fmt.Errorf("%d exclusions; GKE allows at most %d", len(p.Exclusions), MaxExclusions))
	}
	var noUpgrades []Exclusion
	for _, e := range p.Exclusions {
		if e.scope() != NoUpgrades {
			continue
		}
		noUpgrades = append(noUpgrades, e)
		if d := e.End.Sub(e.Start); d > MaxNoUpgradesDuration {
			errs = append(errs, fmt.Errorf("exclusion %q (scope no_upgrades) lasts %s; GKE allows at most %s (other scopes may be longer)",
				e.Name, hours(d), hours(MaxNoUpgradesDuration)))
		}
	}
	if len(noUpgrades) > MaxNoUpgrades {
		errs = append(errs, fmt.Errorf("%d exclusions of scope no_upgrades; GKE allows at most %d", len(noUpgrades), MaxNoUpgrades))
	}
	if from, avail := p.leastAvailable(noUpgrades); avail < MinAvailable {
		what := "the no_upgrades exclusions leave"
		if p.Window != nil {
			what = "the maintenance window, less the no_upgrades exclusions, leaves"
		}
		errs = append(errs, fmt.Errorf("%s %s of maintenance time in the %s from %s (stretches of %s or more); GKE requires at least %s in any %s",
			what, hours(avail), days(AvailabilityPeriod), from.UTC().Format(time.RFC3339), hours(MinStretch), hours(MinAvailable), days(AvailabilityPeriod)))
	}
	return errors.Join(errs...)
}

func hours(d time.Duration) string { return strconv.FormatFloat(d.Hours(), 'f', -1, 64) + "h" }

func days(d time.Duration) string { return strconv.FormatFloat(d.Hours()/24, 'f', -1, 64) + " days" }

// span is [from, to).
type span struct{ from, to time.Time }

// leastAvailable finds, among the AvailabilityPeriods that overlap one of
// excl and start no earlier than the window, the one with the least
// maintenance time: from its start, and how much. With no such period, it
// is MinAvailable (nothing to check).
func (p Policy) leastAvailable(excl []Exclusion) (time.Time, time.Duration) {
	if len(excl) == 0 {
		return time.Time{}, MinAvailable
	}
	lo, hi := excl[0].Start, excl[0].End
	for _, e := range excl {
		lo, hi = minTime(lo, e.Start), maxTime(hi, e.End)
	}
	// Wide enough that no stretch a considered period sees is cut.
	margin := AvailabilityPeriod + 48*time.Hour
	if p.Window != nil {
		margin += p.Window.Duration
	}
	var stretches []span
	for _, s := range p.open(lo.Add(-margin), hi.Add(margin)) {
		for _, piece := range subtract(s, excl) {
			if piece.to.Sub(piece.from) >= MinStretch {
				stretches = append(stretches, piece)
			}
		}
	}
	// The time available in [t, t+period) changes slope only where t or
	// t+period meets a stretch's edge: the least is at one of those, or
	// at an end of the range of periods that overlap an exclusion.
	var ts []time.Time
	for _, s := range stretches {
		ts = append(ts, s.from, s.to, s.from.Add(-AvailabilityPeriod), s.to.Add(-AvailabilityPeriod))
	}
	for _, e := range excl {
		ts = append(ts, e.Start.Add(-AvailabilityPeriod).Add(time.Nanosecond), e.End.Add(-time.Nanosecond))
	}
	if p.Window != nil {
		ts = append(ts, p.Window.Start)
	}
	// Periods that overlap an exclusion, from the window's first
	// occurrence on.
	overlaps := func(t time.Time) bool {
		if p.Window != nil && t.Before(p.Window.Start) {
			return false
		}
		return slices.ContainsFunc(excl, func(e Exclusion) bool {
			return t.Before(e.End) && e.Start.Before(t.Add(AvailabilityPeriod))
		})
	}
	at, least := time.Time{}, time.Duration(-1)
	for _, t := range ts {
		if !overlaps(t) {
			continue
		}
		var avail time.Duration
		end := t.Add(AvailabilityPeriod)
		for _, s := range stretches {
			if from, to := maxTime(s.from, t), minTime(s.to, end); to.After(from) {
				avail += to.Sub(from)
			}
		}
		if least < 0 || avail < least {
			at, least = t, avail
		}
	}
	if least < 0 {
		return time.Time{}, MinAvailable
	}
	return at, least
}

// open is when the window is open within [from, to), as merged spans; all
// of it with no window.
func (p Policy) open(from, to time.Time) []span {
	w := p.Window
	if w == nil {
		return []span{{from, to}}
	}
	var out []span
	timeOfDay := w.Start.UTC().Sub(civilDay(w.Start.UTC()))
	for day := civilDay(from.Add(-w.Duration)); day.Before(to); day = day.AddDate(0, 0, 1) {
		occ := day.Add(timeOfDay)
		if !w.occursAt(occ) {
			continue
		}
		s := span{maxTime(occ, from), minTime(occ.Add(w.Duration), to)}
		if !s.to.After(s.from) {
			continue
		}
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			out[n-1].to = maxTime(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// subtract is s less every exclusion.
func subtract(s span, excl []Exclusion) []span {
	pieces := []span{s}
	for _, e := range excl {
		var next []span
		for _, p := range pieces {
			if !e.Start.Before(p.to) || !p.from.Before(e.End) {
				next = append(next, p)
				continue
			}
			if p.from.Before(e.Start) {
				next = append(next, span{p.from, e.Start})
			}
			if e.End.Before(p.to) {
				next = append(next, span{e.End, p.to})
			}
		}
		pieces = next
	}
	return pieces
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
