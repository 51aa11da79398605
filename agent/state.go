package agent

// The agent's state machine, as a pure function: Step(config, state,
// observation) returns the next state and what to do. The loop around it
// (agent.go) only observes (metadata signals, the Node, the drain's
// progress) and executes (one patch of the Node per decision, Events,
// metrics, the drain, the workload notice on the pods). The state lives on
// the Node (package protocol), so an agent killed at any point and
// restarted continues from the Node alone. Step reads as its sub-steps in
// order; what sets each reason apart (how it ends, whether it is counted
// yet, what it yields to, whether its drain is voluntary) is the table
// reasonRules (reasons.go); the trigger sub-machine is trigger.go.
//
// Lifecycle of one node:
//
//	Idle ──(TERMINATE_ON_HOST_MAINTENANCE, preempted TRUE)──▶ Draining
//	Idle ──(notice ONGOING, where maintenance-event is not served: TPU)──▶ Draining
//	Idle ──(perform-maintenance=true, notice PENDING and can_reschedule)──▶ Draining (manual)
//	Idle ──(the slice's ask: another host of the slice stops)──▶ Draining (slice)
//	Draining ──(drain finished)──▶ Terminating
//	Draining (manual) ──(drain finished, performMaintenance accepted)──▶ Terminating
//	Draining (manual) ──(performMaintenance failed)──▶ Idle
//	Draining, Terminating ──(new boot ID: the VM stopped and came back)──▶ Idle
//	Draining, Terminating ──(every signal cleared, same boot: cancelled)──▶ Idle
//	Draining, Terminating (slice) ──(the ask is withdrawn)──▶ Idle
//
//	| phase       | active-node-maintenance | taint | cordoned          |
//	|-------------|-------------------------|-------|-------------------|
//	| Idle        | (none)                  | no    | as a person left it |
//	| Draining    | ONGOING                 | yes   | yes               |
//	| Terminating | terminating             | yes   | yes               |
//
// In every phase a pending notice is mirrored: the scheduled-maintenance-time
// label (Unix seconds of the window start) and the upcoming-maintenance
// annotation (the notice as served). MIGRATE_ON_HOST_MAINTENANCE is recorded
// and changes nothing else. A signal the metadata server has not answered,
// or answered with a value the parser did not recognise, is unknown: unknown
// never starts a drain and never clears anything.
//
// Returning to Idle uncordons the node unless it was already cordoned when
// maintenance started (protocol.AnnotationCordonedBefore).
//
// Interruptions are counted on the Node (protocol.AnnotationInterruptions)
// once each: a host maintenance or preemption when it starts, a manual one
// when Compute Engine is seen to begin it (or the VM comes back from it), a
// reboot nothing announced when the node comes back; a slice's drain is not
// (the host that stops counts itself). The VM's own maintenance or
// preemption takes over a slice's drain or a manual drain not yet asked
// for, and is counted then. A drain's deadline counts the platform's notice
// from when the signal appeared (stopAt).
//
// Where GKE's own maintenance handler is seen handling the node, a
// maintenance is left to it (leaveToGKE): recorded and counted, never
// drained, cordoned or asked for; the notice keys are removed only if the
// agent mirrored them.
//
// The workload notice (workload.go) follows the state: every pod is told
// the pending window, and, once the maintenance starts, when it will be
// asked to stop.
//
// The manual trigger (protocol.LabelPerformMaintenance, set by a person or the
// aggregator) is read, never acted on blindly:
//   - accepted only as "true", only with a notice that is PENDING and
//     can_reschedule, and only while the node is Idle; anything else is a
//     Warning Event and the label is removed, with no other change;
//   - a manual maintenance drains by the host-maintenance policy with the
//     manual-drain deadline, then asks Compute Engine once (RequestID, kept
//     on the Node, makes a retried call idempotent; Requested, written
//     before the call, stops a restarted agent from calling again once the
//     signals show the call was accepted);
//   - once accepted it runs to its end: the label set again is a no-op,
//     removing it cancels nothing (the drain has begun and Compute Engine
//     may have been asked), another value is answered and removed;
//   - a real TERMINATE_ON_HOST_MAINTENANCE, ONGOING notice or preemption
//     before the call turns it into that maintenance, with no call (the
//     RequestID stays: the label started it);
//   - a failed call puts the node back in service; the label goes when the
//     node is back in service, whichever way.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// State is what the agent keeps on its Node (package protocol encodes
// it).
type State = protocol.AgentState

// Signals is what the metadata server last said, key by key.
type Signals struct {
	Event      metadata.Event
	EventKnown bool
	// EventNotServed: the VM does not serve maintenance-event (404, as on
	// TPU VMs); Event is then NONE and known, and the notice turning
	// ONGOING is the only sign that a host maintenance begins.
	EventNotServed bool

	// EventSince is the last moment the watcher knows maintenance-event
	// held another value (metadata.Answer.Since); zero when it does not
	// know: the value was the first it saw.
	EventSince time.Time

	Preempted      bool
	PreemptedKnown bool
	// PreemptedSince is EventSince for preempted.
	PreemptedSince time.Time

	Notice        metadata.Notice
	NoticePresent bool
	NoticeKnown   bool
	// NoticeNotYet: the server answered upcoming-maintenance with 503 "no
	// notifications have been received yet, try again later". It says no
	// notice is pending for mirroring, but it is no proof that a notice
	// that turned ONGOING is over: it never ends a drain.
	NoticeNotYet bool
}

// Observation is everything Step looks at besides the state.
type Observation struct {
	Now     time.Time
	Signals Signals
	// BootID is the node's status.nodeInfo.bootID now.
	BootID string
	// KubeletVersion is the node's status.nodeInfo.kubeletVersion now.
	KubeletVersion string
	// Unschedulable is the node's spec.unschedulable now.
	Unschedulable bool
	// DrainDone: the drain of the current maintenance has finished, and
	// DrainLeft names the pods it left on the node (see drain.Result.Left).
	DrainDone bool
	DrainLeft []string
	// Trigger is the perform-maintenance label's value; TriggerSet whether
	// the label is there at all.
	Trigger    string
	TriggerSet bool
	// RequestID is a fresh UUID, the requestId of a manual maintenance
	// that starts now.
	RequestID string
	// Perform is the result of the performMaintenance call for the state's
	// RequestID, once it has returned.
	Perform *PerformResult
	// Opportunistic: the aggregator set the trigger (maintenance-state
	// says opportunistic-triggered), at TriggeredAt (zero when it cannot
	// be read), for the notice whose scheduled-maintenance-time is
	// TriggerFor.
	Opportunistic bool
	TriggeredAt   time.Time
	TriggerFor    string
	// ManualBlocked is why the maintenance policy refuses a manual trigger
	// now (a Manual* outcome; "" when it does not), and ManualBlockedDetail
	// says it in words.
	ManualBlocked, ManualBlockedDetail string
	// PodsKnown: Idle and Busy come from a filled pod cache.
	PodsKnown bool
	Idle      bool
	Busy      string
	// SliceAsk is the ask that this host drain with its multi-host slice,
	// another host of which stops: what the agent works out from its
	// slice's hosts, or the aggregator's on the Node (slice.go);
	// SliceAskSet whether there is one.
	SliceAsk    protocol.SliceAsk
	SliceAskSet bool
	// Slice names the node's multi-host slice ("" for none). For a
	// voluntary maintenance of it, SliceCaller says whether this host
	// makes the slice's one performMaintenance call
	// (protocol.SliceCaller); SliceWaiting names the other hosts that
	// still drain, and SliceIncomplete those whose voluntary drain ended
	// with pods left (protocol.SliceDrained).
	Slice string
	// SliceAskExpired: the ask is no longer followed, its cause having
	// started protocol.SliceDrainLimit ago (Step sets it).
	SliceAskExpired bool
	// SliceVoluntary: a host of the slice has a manual or opportunistic
	// maintenance under way (protocol.SliceCaller names one).
	SliceVoluntary, SliceCaller   bool
	SliceWaiting, SliceIncomplete []string
	// GKEHandling says how the Node shows GKE's own maintenance handler
	// handling it (protocol.GKEHandling); "" when it does not.
	GKEHandling string
}

// PerformResult is how a performMaintenance call ended.
type PerformResult struct {
	RequestID string
	// Operation names Compute Engine's operation when the call succeeded.
	Operation string
	// Err is why it failed, and Outcome its class (protocol.ManualFailed,
	// protocol.ManualPermissionDenied, protocol.ManualRefused).
	Err     error
	Outcome string
	// OperationErr is set when the accepted call's operation ended with an
	// error.
	OperationErr error
}

// Config holds the deadlines.
type Config struct {
	// HostMaintenanceDeadline is how long after TERMINATE_ON_HOST_MAINTENANCE
	// (or a notice turning ONGOING) the VM is expected to stop: 60 min for
	// GPU VMs.
	HostMaintenanceDeadline time.Duration
	// PreemptionDeadline is how long after preempted=TRUE the VM stops: 30 s.
	// It is also what a drain gets whose estimated stop has already passed
	// (see stopAt).
	PreemptionDeadline time.Duration
	// OngoingDeadline is how long after its window opens a VM that drains
	// on the notice turning ONGOING (a TPU VM, which serves no
	// maintenance-event) is expected to stop: 5 min, the longest Cloud TPU
	// waits for a process to exit after SIGTERM before it maintains the
	// host.
	OngoingDeadline time.Duration
	// ManualDrainTimeout is the drain deadline of a manual maintenance,
	// counted from the label being accepted (1 h, as for node upgrades).
	ManualDrainTimeout time.Duration
	// ManualStartTimeout bounds the time from the performMaintenance call
	// to the maintenance beginning (TERMINATE_ON_HOST_MAINTENANCE or the
	// notice ONGOING): past it, the drained node goes back in service.
	ManualStartTimeout time.Duration
	// ManualDrainEscalate: a manual drain deletes a pod a
	// PodDisruptionBudget still protects at the deadline minus its grace,
	// as a host maintenance's does. False (the default): a manual
	// maintenance is voluntary, the budgets hold to the end, and a drain
	// that cannot finish by its deadline is given up.
	ManualDrainEscalate bool
	// FailureCooldown is how long after a voluntary maintenance failed the
	// aggregator leaves the node alone; it doubles with each failure in a
	// row, up to MaxFailureCooldown.
	FailureCooldown, MaxFailureCooldown time.Duration
	// TriggerMaxAge is the oldest opportunistic trigger the agent acts on:
	// an older one was decided about a node that may have changed since.
	TriggerMaxAge time.Duration
	// IgnoreGKEHandler: the agent handles every maintenance itself, even
	// one GKE's own handler is seen handling. False (the default): such a
	// maintenance is left to GKE's handler (leaveToGKE).
	IgnoreGKEHandler bool
}

// DefaultConfig is what Compute Engine documents.
var DefaultConfig = Config{HostMaintenanceDeadline: 60 * time.Minute, PreemptionDeadline: 30 * time.Second, OngoingDeadline: 5 * time.Minute, ManualDrainTimeout: protocol.DefaultManualDrainTimeout,
	ManualStartTimeout: 15 * time.Minute, TriggerMaxAge: 5 * time.Minute, FailureCooldown: time.Hour, MaxFailureCooldown: 24 * time.Hour}

// withDefaults fills every zero field from DefaultConfig: a zero deadline
// would evict every pod at once.
func (c Config) withDefaults() Config {
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.HostMaintenanceDeadline, &DefaultConfig.HostMaintenanceDeadline},
		{&c.PreemptionDeadline, &DefaultConfig.PreemptionDeadline},
		{&c.OngoingDeadline, &DefaultConfig.OngoingDeadline},
		{&c.ManualDrainTimeout, &DefaultConfig.ManualDrainTimeout},
		{&c.ManualStartTimeout, &DefaultConfig.ManualStartTimeout},
		{&c.TriggerMaxAge, &DefaultConfig.TriggerMaxAge},
		{&c.FailureCooldown, &DefaultConfig.FailureCooldown},
		{&c.MaxFailureCooldown, &DefaultConfig.MaxFailureCooldown},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return c
}

// EventRecord is a Kubernetes Event to emit on the Node.
type EventRecord struct {
	Warning bool
	Reason  string
	Message string
}

// counted is an interruption for Decision to count.
func counted(i protocol.Interruption) *protocol.Interruption { return &i }

// countedAs is the interruption a maintenance started for r counts as.
func countedAs(r protocol.Reason) *protocol.Interruption {
	i, _ := r.Interruption()
	return &i
}

// Decision is the outcome of one Step.
type Decision struct {
	State  State
	Events []EventRecord
	// Interruption is set when a new maintenance or preemption began (or
	// Compute Engine was seen to begin a manual one).
	Interruption *protocol.Interruption
	// Unannounced is set when the node rebooted with nothing announced
	// (HostError, or NodeUpgrade when the kubelet version changed).
	Unannounced *protocol.Interruption
	// Migration is set when live migration was announced.
	Migration bool
	// Cordon sets spec.unschedulable; Uncordon clears it.
	Cordon, Uncordon bool
	// Drained is set when the drain finished (Draining to Terminating).
	Drained bool
	// RemoveTrigger removes the perform-maintenance label and the
	// maintenance-state annotation that came with it.
	RemoveTrigger bool
	// Perform asks for the performMaintenance call of State.RequestID to be
	// running (at most one per request ID).
	Perform bool
	// Manual is the outcome of a manual trigger to count, if any.
	Manual string
	// WakeAt, when set, is when to step again though nothing changes.
	WakeAt time.Time
	// Drain is the drain that must be running now; zero when none must.
	// The loop starts it, restarts it when it changes (a preemption moves
	// the deadline of a drain under way) and stops it when it is zero.
	Drain DrainOrder
}

// DrainOrder names a drain: the maintenance it is for (its start), the
// deadline it must end by, and whether it is voluntary (PodDisruptionBudgets
// hold to the end: drain.Drainer.DrainVoluntary).
type DrainOrder struct {
	For, Deadline time.Time
	Voluntary     bool
	// Reason is the maintenance's: what a pod the drain deletes is told.
	// A change of it alone does not restart the drain.
	Reason protocol.Reason
}

// IsZero: no drain.
func (o DrainOrder) IsZero() bool { return o.For.IsZero() }

// Equal: the same drain.
func (o DrainOrder) Equal(p DrainOrder) bool {
	return o.For.Equal(p.For) && o.Deadline.Equal(p.Deadline) && o.Voluntary == p.Voluntary
}

// Step is the state machine. It is pure: the same inputs give the same
// decision, and applying a decision's state and stepping again with the
// same observation changes nothing more. It reads as its sub-steps, in
// order; what sets each maintenance reason apart is in reasonRules.
func Step(cfg Config, st State, obs Observation) Decision {
	if st.Phase == "" {
		st.Phase = protocol.PhaseIdle
	}
	d := Decision{State: st}
	obs = d.expireSliceAsk(obs)
	d.unannouncedReboot(obs)
	d.backInService(obs)
	d.maintenanceStarts(cfg, obs)
	d.migration(obs.Signals)
	d.manual(cfg, obs) // trigger.go
	d.followSlice(cfg, obs)
	d.leaveToGKE(cfg, st, obs)
	d.drained(cfg, obs)
	if obs.Signals.NoticeKnown {
		d.mirrorNotice(obs.Signals)
	}
	d.manualHappened(st, obs) // trigger.go
	d.count(obs)
	d.drainOrder(cfg, st, obs)
	d.rememberFailure(cfg, obs.Now) // trigger.go
	d.idleness(obs)
	return d
}

// unannouncedReboot: the agent was idle and the node came back with
// another boot ID, nothing announced: a node upgrade when the kubelet's
// version changed, a host error otherwise.
func (d *Decision) unannouncedReboot(obs Observation) {
	st := d.State
	if st.Phase != protocol.PhaseIdle || st.LastBootID == "" || obs.BootID == "" || obs.BootID == st.LastBootID {
		return
	}
	if obs.KubeletVersion != "" && st.LastKubelet != "" && obs.KubeletVersion != st.LastKubelet {
		d.Unannounced = counted(protocol.Upgrade)
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventNodeUpgraded,
			Message: fmt.Sprintf("The node rebooted into kubelet %s (was %s): counted as a node upgrade", obs.KubeletVersion, st.LastKubelet)})
		return
	}
	d.Unannounced = counted(protocol.UnannouncedReboot)
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventUnexpectedReboot,
		Message: fmt.Sprintf("The VM rebooted with no maintenance notice or preemption before it (boot ID %s, was %s): counted as a host error", obs.BootID, st.LastBootID)})
}

// backInService: the VM stopped and came back (another boot ID), or the
// maintenance is over without a stop (reasonRule.over): the node goes
// back in service.
func (d *Decision) backInService(obs Observation) {
	st := d.State
	if st.Phase == protocol.PhaseIdle {
		return
	}
	booted := obs.BootID != "" && st.BootID != "" && obs.BootID != st.BootID
	// A maintenance left to GKE's handler is also over when GKE's handler
	// let go of the node with nothing under way.
	gkeLetGo := st.LeftToGKE && obs.GKEHandling == "" && signalsWithdrawn(st, obs)
	if !booted && !ruleOf(st.Reason).over(st, obs) && !gkeLetGo {
		return
	}
	reason, msg, warning := protocol.EventMaintenanceCleared, fmt.Sprintf("Node is back from %s (boot ID %s); removing the taint and the maintenance label", st.Reason, obs.BootID), false
	switch {
	case !booted && st.Reason == protocol.ReasonSlice && obs.SliceAskExpired:
		reason, msg, warning = protocol.EventSliceBack, fmt.Sprintf("A host of the multi-host slice %s has been down for %s, the longest a host drains for its slice; this host goes back in service, though its slice is not whole", obs.SliceAsk.Slice, protocol.SliceDrainLimit), true
	case !booted && st.Reason == protocol.ReasonSlice:
		reason, msg = protocol.EventSliceBack, "The multi-host slice is back in service (no host of it is in a maintenance of its own, and the aggregator asks nothing); so is this host"
	case !booted:
		reason, msg, warning = protocol.EventMaintenanceAborted, fmt.Sprintf("The %s was withdrawn before the VM stopped; putting the node back in service", st.Reason), true
	}
	d.Events = append(d.Events, EventRecord{Warning: warning, Reason: reason, Message: msg})
	d.Uncordon = !st.CordonedBefore
	d.RemoveTrigger = st.RequestID != ""
	d.State = idleState(st)
	if booted {
		// The maintenance that took the VM down is over, and so is its
		// notice; a value still served after the reboot is a new one (a
		// notice still pending is mirrored again later in the step), but
		// for the ONGOING notice of the maintenance that stopped it, which
		// a TPU VM may serve for a while after: that one is done.
		if n, present, err := metadata.ParseNotice(st.Notice); err == nil && present && n.Status == metadata.StatusOngoing {
			d.State.NoticeDone = noticeID(n)
		}
		d.State.LastEvent = metadata.EventNone
		if !d.State.NoticeForeign {
			d.State.ScheduledTime, d.State.Notice = "", ""
		}
	}
}

// maintenanceStarts: the VM's own maintenance or preemption begins, on an
// idle node or over a maintenance that yields to it (reasonRule.yields),
// or a preemption shortens a drain under way.
func (d *Decision) maintenanceStarts(cfg Config, obs Observation) {
	sig := obs.Signals
	now := obs.Now
	idle := d.State.Phase == protocol.PhaseIdle
	rule := ruleOf(d.State.Reason)
	switch {
	case sig.PreemptedKnown && sig.Preempted:
		deadline, how := stopAt(cfg, now, cfg.PreemptionDeadline, sig.PreemptedSince, time.Time{}, time.Time{})
		if idle {
			d.start(obs, protocol.ReasonPreemption, deadline)
			d.Interruption = countedAs(protocol.ReasonPreemption)
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
				Message: fmt.Sprintf("The VM was preempted; draining before it stops at %s%s", deadline.UTC().Format(time.RFC3339), how)})
			return
		}
		if d.State.Reason == protocol.ReasonPreemption || !deadline.Before(d.State.Deadline) && !rule.yields(d.State, protocol.ReasonPreemption) {
			return
		}
		if !rule.counted(d.State) {
			d.Interruption = countedAs(protocol.ReasonPreemption)
		}
		d.State.Reason = protocol.ReasonPreemption
		if deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
		}
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
			Message: fmt.Sprintf("The VM was preempted during maintenance; the drain deadline moves to %s", d.State.Deadline.UTC().Format(time.RFC3339))})
	case (idle || rule.yields(d.State, protocol.ReasonHostMaintenance)) && sig.EventKnown && sig.Event == metadata.EventTerminate:
		deadline, how := terminateStop(cfg, sig, now)
		d.hostMaintenance(obs, deadline, protocol.EventTerminateOnHost, "Host maintenance will stop the VM; draining before %s"+how)
	case d.State.Reason == protocol.ReasonHostMaintenance && sig.EventKnown && sig.Event == metadata.EventTerminate:
		// Under way: the metadata server's keys answer in any order, so
		// the window that bounds the stop may come after the signal.
		if deadline, how := terminateStop(cfg, sig, now); deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventTerminateOnHost,
				Message: fmt.Sprintf("The drain deadline moves to %s%s", deadline.UTC().Format(time.RFC3339), how)})
		}
	case (idle && sig.EventNotServed || !idle && rule.yields(d.State, protocol.ReasonHostMaintenance)) && sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == metadata.StatusOngoing &&
		noticeID(sig.Notice) != d.State.NoticeDone:
		// Where maintenance-event is served, the drain starts on
		// TERMINATE_ON_HOST_MAINTENANCE (as GKE 1.33 does), not at the
		// window's start. Where it is not (TPU VMs), the window's opening
		// is the signal, and the platform says when it was.
		deadline, how := stopAt(cfg, now, cfg.OngoingDeadline, time.Time{}, sig.Notice.WindowStart, sig.Notice.WindowEnd)
		d.hostMaintenance(obs, deadline, protocol.EventMaintenanceStarted, "The maintenance window has started; draining before %s"+how)
	}
}

// terminateStop is when the VM stops after TERMINATE_ON_HOST_MAINTENANCE
// (stopAt): it comes inside the window, so an open window bounds when it
// appeared, and its end when the VM stops.
func terminateStop(cfg Config, sig Signals, now time.Time) (time.Time, string) {
	after, closes := sig.EventSince, time.Time{}
	if n := sig.Notice; sig.NoticeKnown && sig.NoticePresent && n.Status == metadata.StatusOngoing {
		if n.WindowStart.After(after) && !n.WindowStart.After(now) {
			after = n.WindowStart
		}
		closes = n.WindowEnd
	}
	return stopAt(cfg, now, cfg.HostMaintenanceDeadline, after, time.Time{}, closes)
}

// stopAt is when the VM stops after a signal that the platform gives
// notice ahead of the stop, and how it was found, for the Event. It counts
// the notice from when the signal appeared, so that a drain never plans
// with time the VM does not have: at opened where the platform says when
// (the window's start, for a notice turning ONGOING), otherwise at the
// earliest moment it may have: after the watcher's last other answer or
// the platform's bound (after), but no earlier than notice ago (it would
// have stopped by now). When nothing says more than that (the agent was
// not watching when the signal appeared: it just started), the notice
// counts from now, and the Event says so. The stop comes no later than
// closes (the window's end) while that is ahead. An estimate already past
// (the VM outlived what the platform documents) becomes what a preemption
// gets: it may stop at any moment.
func stopAt(cfg Config, now time.Time, notice time.Duration, after, opened, closes time.Time) (time.Time, string) {
	appeared, how := now, "; the agent did not see the signal appear, so its notice counts from now"
	switch {
	case !opened.IsZero() && !opened.After(now):
		appeared, how = opened, ""
		if now.Sub(opened) > time.Second {
			how = fmt.Sprintf("; the window opened at %s, and the %s the VM is given counts from then", opened.UTC().Format(time.RFC3339), notice)
		}
	case after.After(now.Add(-notice)) && !after.After(now):
		appeared, how = after, ""
		if now.Sub(after) > time.Second {
			how = fmt.Sprintf("; the signal came at %s or later (the agent was not watching then), and its notice of %s counts from then", after.UTC().Format(time.RFC3339), notice)
		}
	}
	deadline := appeared.Add(notice)
	if closes.After(now) && closes.Before(deadline) {
		deadline, how = closes, "; the maintenance window closes then"
	}
	if !deadline.After(now) {
		deadline, how = now.Add(cfg.PreemptionDeadline), fmt.Sprintf("; the VM outlived the %s the platform gives from %s, so it may stop at any moment: drained as for a preemption", notice, appeared.UTC().Format(time.RFC3339))
	}
	return deadline, how
}

// hostMaintenance starts a host maintenance on an idle node, or over a
// maintenance that yields to it (keeping the earlier deadline).
//
// On a host of a multi-host slice that drains for a voluntary maintenance
// of its slice that another host asks for, the host maintenance that
// begins is that one: starting maintenance on one instance of a slice
// starts it on every instance. It is counted once, by the host that asked
// (manualHappened), not again here.
func (d *Decision) hostMaintenance(obs Observation, deadline time.Time, reason, format string) {
	ofSlice := obs.SliceVoluntary && !obs.SliceCaller && d.State.Active() &&
		(d.State.Reason == protocol.ReasonSlice || d.State.Reason == protocol.ReasonManual && d.State.Requested.IsZero())
	if d.State.Phase == protocol.PhaseIdle {
		d.start(obs, protocol.ReasonHostMaintenance, deadline)
	} else {
		d.State.Reason = protocol.ReasonHostMaintenance
		if deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
		}
	}
	msg := fmt.Sprintf(format, d.State.Deadline.UTC().Format(time.RFC3339))
	if ofSlice {
		msg += fmt.Sprintf(". It is the maintenance of the multi-host slice %s, which another host of it asked for: counted once, by that host", obs.Slice)
	} else {
		d.Interruption = countedAs(protocol.ReasonHostMaintenance)
	}
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: reason, Message: msg})
}

// migration: live migration is recorded, once per announcement, and
// changes nothing else.
func (d *Decision) migration(sig Signals) {
	if !sig.EventKnown {
		return
	}
	if sig.Event == metadata.EventMigrate && d.State.LastEvent != metadata.EventMigrate {
		d.Migration = true
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMigrateOnHost,
			Message: "Compute Engine will live-migrate the VM; nothing to drain"})
	}
	d.State.LastEvent = sig.Event
}

// wakeAt asks for a step at t, or earlier if another sub-step asked so.
func (d *Decision) wakeAt(t time.Time) {
	if d.WakeAt.IsZero() || t.Before(d.WakeAt) {
		d.WakeAt = t
	}
}

// expireSliceAsk: an ask whose cause started protocol.SliceDrainLimit ago
// or more is no longer followed (the host goes back in service, and says
// why); until then, the step wakes at that limit.
func (d *Decision) expireSliceAsk(obs Observation) Observation {
	if !obs.SliceAskSet {
		return obs
	}
	if limit := obs.SliceAsk.Started.Add(protocol.SliceDrainLimit); obs.Now.Before(limit) {
		d.wakeAt(limit)
		return obs
	}
	obs.SliceAskSet, obs.SliceAskExpired = false, true
	return obs
}

// followSlice: another host of the node's multi-host slice stops (the
// ask): drain with it, or by its earlier deadline. It comes after the
// trigger, so that a host whose own pending maintenance is taken with the
// slice's starts that maintenance instead. An ask whose deadline has
// passed (the agent read it late: it was down, or just started) gives the
// drain what a preemption gives: the cause's host may be gone already,
// and a drain by a past deadline would give every pod a second.
func (d *Decision) followSlice(cfg Config, obs Observation) {
	ask := obs.SliceAsk
	if !obs.SliceAskSet {
		return
	}
	deadline, late := ask.Deadline, ""
	if !deadline.After(obs.Now) {
		deadline = obs.Now.Add(cfg.PreemptionDeadline)
		late = fmt.Sprintf(" (its deadline %s has passed: drained as for a preemption)", ask.Deadline.UTC().Format(time.RFC3339))
	}
	switch {
	case d.State.Phase == protocol.PhaseIdle:
		d.start(obs, protocol.ReasonSlice, deadline)
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDrain,
			Message: fmt.Sprintf("Host %s of the multi-host slice %s stops (%s); its job cannot run without it, so this host drains with it, before %s%s",
				ask.Cause, ask.Slice, ask.Reason, deadline.UTC().Format(time.RFC3339), late)})
	case deadline.Before(d.State.Deadline):
		d.State.Deadline = deadline
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDeadline,
			Message: fmt.Sprintf("Host %s of the multi-host slice %s stops first (%s); this host's drain deadline moves to %s%s",
				ask.Cause, ask.Slice, ask.Reason, deadline.UTC().Format(time.RFC3339), late)})
	}
}

// leaveToGKE: GKE's own maintenance handler is seen handling the node
// (Observation.GKEHandling), so the maintenance under way, or starting
// now, is left to it, unless the configuration says to ignore GKE's
// handler: two handlers would drain the same pods in different orders and
// call Compute Engine twice. The agent stops its drain, makes no call,
// does not cordon (a cordon it made stays its own to undo), and leaves
// the active-maintenance label and the taint to GKE's handler; it still
// counts the interruption, and the maintenance ends as any does.
func (d *Decision) leaveToGKE(cfg Config, before State, obs Observation) {
	if cfg.IgnoreGKEHandler || obs.GKEHandling == "" || !d.State.Active() || d.State.LeftToGKE {
		return
	}
	d.State.LeftToGKE = true
	// A call this step was about to make is not made.
	d.Perform, d.State.Requested = false, before.Requested
	if d.Cordon {
		// Started in this very step: the agent never cordons it, so it
		// is not the agent's to uncordon either.
		d.Cordon, d.State.CordonedBefore = false, true
	}
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventLeftToGKE,
		Message: fmt.Sprintf("GKE's maintenance handler is handling this node (%s), so the %s is left to it: the agent does not drain or cordon the node, does not call Compute Engine, and leaves GKE's label and taint; it counts the interruption (--gke-handler=defer)",
			obs.GKEHandling, d.State.Reason)})
}

// drained: the drain finished, and the node waits for the VM to stop. A
// maintenance that asks Compute Engine (reasonRule.asksCompute) is
// finished when Compute Engine accepts it (trigger.go).
func (d *Decision) drained(cfg Config, obs Observation) {
	if d.State.Phase != protocol.PhaseDraining || ruleOf(d.State.Reason).asksCompute || !obs.DrainDone {
		return
	}
	if d.State.Reason == protocol.ReasonSlice && len(obs.DrainLeft) > 0 && voluntaryDrain(cfg, d.State, obs) {
		// A voluntary maintenance of the slice: the host that asks for it
		// reads this and gives the slice up, which withdraws the ask.
		if d.State.Drain != protocol.DrainIncomplete {
			d.State.Drain = protocol.DrainIncomplete
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualAbandoned,
				Message: fmt.Sprintf("The drain for the multi-host slice %s could not finish by its deadline %s: %d pod(s) are still on the node (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating): %s. The slice's maintenance is voluntary, so no pod was deleted; it is given up on every host.",
					obs.SliceAsk.Slice, d.State.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), excerpt(obs.DrainLeft, 5))})
		}
		return
	}
	d.State.Phase = protocol.PhaseTerminating
	d.Drained = true
	msg := fmt.Sprintf("All pods were stopped; the node is ready for the VM to stop (deadline %s)", d.State.Deadline.UTC().Format(time.RFC3339))
	if d.State.Reason == protocol.ReasonSlice {
		msg = "All pods were stopped; the host waits for its multi-host slice to come back"
	}
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventEvictionComplete, Message: msg})
}

// count records what the node runs (boot ID, kubelet version) and adds
// this step's interruptions to the node's counts.
func (d *Decision) count(obs Observation) {
	if obs.BootID != "" {
		d.State.LastBootID = obs.BootID
	}
	if obs.KubeletVersion != "" {
		d.State.LastKubelet = obs.KubeletVersion
	}
	for _, i := range []*protocol.Interruption{d.Unannounced, d.Interruption} {
		if i != nil {
			d.State.Interruptions = d.State.Interruptions.Add(*i, 1)
		}
	}
}

// drainOrder: the drain runs while the node drains and its drain is not
// done (a drain that is done and waits for Compute Engine is not run
// again); voluntary as its reason says (reasonRule.voluntary), unless
// the configuration escalates manual drains.
func (d *Decision) drainOrder(cfg Config, before State, obs Observation) {
	if d.State.Phase != protocol.PhaseDraining || d.State.LeftToGKE || obs.DrainDone && d.State.Started.Equal(before.Started) {
		return
	}
	d.Drain = DrainOrder{For: d.State.Started, Deadline: d.State.Deadline, Voluntary: voluntaryDrain(cfg, d.State, obs), Reason: d.State.Reason}
}

// voluntaryDrain: st's drain keeps to the PodDisruptionBudgets to its end,
// as its reason says (reasonRule.voluntary), unless the configuration
// escalates manual drains.
func voluntaryDrain(cfg Config, st State, obs Observation) bool {
	return ruleOf(st.Reason).voluntary(obs) && !cfg.ManualDrainEscalate
}

// idleness, for the aggregator: since when no workload runs, or what runs.
func (d *Decision) idleness(obs Observation) {
	if !obs.PodsKnown {
		return
	}
	if obs.Idle {
		if d.State.IdleSince.IsZero() {
			d.State.IdleSince = obs.Now
		}
		d.State.Busy = ""
		return
	}
	d.State.IdleSince, d.State.Busy = time.Time{}, obs.Busy
}

// idleState is st back in service: what outlives a maintenance, nothing else.
func idleState(st State) State {
	return State{Phase: protocol.PhaseIdle, ScheduledTime: st.ScheduledTime, Notice: st.Notice, LastEvent: st.LastEvent,
		IdleSince: st.IdleSince, Busy: st.Busy, Interruptions: st.Interruptions, LastBootID: st.LastBootID, LastKubelet: st.LastKubelet,
		Failures: st.Failures, NoticeForeign: st.NoticeForeign}
}

func (d *Decision) start(obs Observation, reason protocol.Reason, deadline time.Time) {
	d.State.Phase = protocol.PhaseDraining
	d.State.Reason = reason
	d.State.Started = obs.Now
	d.State.Deadline = deadline
	d.State.BootID = obs.BootID
	// A cordon this same step was about to undo is the agent's own, from
	// the maintenance that just ended: not a person's.
	d.State.CordonedBefore = obs.Unschedulable && !d.Uncordon
	d.Cordon = true
	d.Uncordon = false
}

func (d *Decision) mirrorNotice(sig Signals) {
	prevTime := d.State.ScheduledTime
	if sig.NoticeKnown && (!sig.NoticePresent || noticeID(sig.Notice) != d.State.NoticeDone) {
		d.State.NoticeDone = "" // that notice is gone: another is another maintenance
	}
	if d.State.NoticeForeign {
		// Another controller's (GKE's handler's): never the agent's to
		// remove; a notice of the agent's own replaces it.
		if !sig.NoticePresent {
			return
		}
		d.State.NoticeForeign, prevTime = false, ""
	}
	if !sig.NoticePresent {
		if d.State.Notice != "" || prevTime != "" {
			d.State.Notice, d.State.ScheduledTime = "", ""
			if prevTime != "" && d.State.Phase == protocol.PhaseIdle {
				d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceCancelled,
					Message: "The scheduled maintenance is no longer pending"})
			}
		}
		return
	}
	n := sig.Notice
	d.State.Notice = n.Raw
	if n.Status != metadata.StatusPending {
		d.State.ScheduledTime = ""
		return
	}
	ts := strconv.FormatInt(n.WindowStart.Unix(), 10)
	if ts == prevTime {
		return
	}
	d.State.ScheduledTime = ts
	when := n.WindowStart.UTC().Format(time.RFC3339)
	if prevTime == "" {
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceScheduled,
			Message: fmt.Sprintf("Maintenance is scheduled for %s (can reschedule: %t)", when, n.CanReschedule)})
	} else {
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventMaintenanceRescheduled,
			Message: fmt.Sprintf("Maintenance was rescheduled to %s", when)})
	}
}

// noticeID names a notice by its window start: a reboot does not change
// it, another maintenance does.
func noticeID(n metadata.Notice) string { return strconv.FormatInt(n.WindowStart.Unix(), 10) }
