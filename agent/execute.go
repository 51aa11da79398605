package agent

// Executing a decision: the Node written, Events recorded, metrics counted, the drain and the call started or stopped.

import (
	"context"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// execute records a decision that is now on the Node, and runs the drain
// while the phase is Draining.
// repair is the approval of the node's repair the step read (zero for
// none).
func (a *Agent) execute(ctx context.Context, dec lifecycle.Decision, carried protocol.Counts, latency time.Duration, repair protocol.RepairApproval) {
	st := dec.State
	a.wakeAt = dec.WakeAt
	a.syncConditions(ctx, st)
	a.syncDeviceTaints(ctx, st)
	if a.opts.Mirror != nil {
		deadline := st.Deadline
		if !st.Active() {
			deadline = time.Time{}
		}
		a.opts.Mirror.SetDeadline(deadline)
	}
	for _, e := range dec.Events {
		if e.GKEWrites {
			a.log.Info("node event left to GKE's handler, which writes its own", "reason", e.Reason, "message", e.Message)
			continue
		}
		a.opts.Events.NodeEvent(e.Warning, e.Reason, e.Message)
		a.log.Info("node event", "reason", e.Reason, "message", e.Message)
	}
	a.syncCounts(st.Interruptions.Plus(carried))
	if latency > 0 {
		a.opts.Metrics.TaintLatency(latency)
	}
	if dec.Manual != "" {
		a.opts.Metrics.ManualTrigger(dec.Manual)
	}
	if dec.Perform {
		a.startPerform(ctx, st, repair)
	}
	a.follow(ctx, st)
	if dec.Repair != "" {
		a.opts.Metrics.FaultRepair(repair.Behavior, repair.Source, dec.Repair)
		if dec.Repair == protocol.RepairDone && !repair.Approved.IsZero() {
			a.opts.Metrics.RepairDuration(a.opts.Clock.Since(repair.Approved))
		}
	}
	if dec.Migration {
		a.opts.Metrics.Migration()
	}
	if dec.Drained {
		a.opts.Metrics.DrainDuration(a.opts.Clock.Since(st.Started))
	}
	a.opts.Metrics.SetPhase(st.Phase)
	var deadline time.Time
	if st.Phase == protocol.PhaseDraining {
		deadline = st.Deadline
	}
	scheduled, err := protocol.ParseScheduledTime(st.ScheduledTime)
	if err != nil {
		// Another's label (GKE's writes it too), read at every step: said
		// at debug, and the metric left out.
		a.log.Debug("the node's scheduled maintenance time is unreadable; not exported", "err", err)
	}
	a.opts.Metrics.SetNode(deadline, scheduled, st.Busy != "")
	a.opts.Metrics.SetFailures(st.Failures.Count)
	a.followDrain(ctx, dec.Drain)
	a.mu.Lock()
	drainStart := a.drainStart
	a.mu.Unlock()
	a.setNotice(lifecycle.WorkloadTargetOf(st, drainStart))
}

// syncCounts makes the interruption counters follow the Node's counts (the
// agent's and the repairs the aggregator counted), which only grow: so they
// continue a node's totals across agent restarts and reboots.
func (a *Agent) syncCounts(counts protocol.Counts) {
	if a.counted == nil {
		a.counted = map[string]int{}
	}
	for key, n := range counts {
		i, ok := protocol.ParseInterruptionKey(key)
		if !ok || n <= a.counted[key] {
			continue
		}
		a.opts.Metrics.AddInterruptions(i, n-a.counted[key])
		a.counted[key] = n
	}
}
