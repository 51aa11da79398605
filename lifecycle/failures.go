package lifecycle

// The failure memory of voluntary maintenance: a manual or opportunistic
// maintenance that Compute Engine did not start, or whose drain was given
// up, is remembered on the Node, and the aggregator leaves the node alone
// for a cool-down that doubles with each failure in a row.

import (
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// voluntaryFailure: the outcome is a voluntary maintenance that Compute
// Engine did not start or the drain gave up, which the aggregator should
// not try again at once (a rejected label is not one, but for a VM that
// live-migrates, which will refuse every trigger).
func voluntaryFailure(outcome string) bool {
	switch outcome {
	case protocol.ManualFailed, protocol.ManualPermissionDenied, protocol.ManualRefused, protocol.ManualNotStarted, protocol.ManualAbandoned,
		protocol.ManualLiveMigrates:
		return true
	}
	return false
}

// nextFailures is f with one more failure at now: the cool-down doubles
// with each failure in a row, from FailureCooldown to MaxFailureCooldown.
func nextFailures(cfg Config, f protocol.Failures, outcome string, now time.Time) protocol.Failures {
	f.Count++
	f.Reason, f.Last = outcome, now
	wait := cfg.FailureCooldown
	for i := 1; i < f.Count && wait < cfg.MaxFailureCooldown; i++ {
		wait *= 2
	}
	f.RetryAfter = now.Add(min(wait, cfg.MaxFailureCooldown))
	return f
}

// rememberFailure: a voluntary maintenance that failed is remembered, for
// the aggregator's cool-down; one that happened (manualHappened) clears
// the record. Compute Engine's acceptance alone does neither.
func (d *Decision) rememberFailure(cfg Config, now time.Time) {
	if voluntaryFailure(d.Manual) {
		d.State.Failures = nextFailures(cfg, d.State.Failures, d.Manual, now)
	}
}
