package agent

// The agent's state machine, as a pure function: Step(config, state,
// observation) returns the next state and what to do. The loop around it
// (agent.go) only observes (metadata signals, the Node, the drain's
// progress) and executes (one patch of the Node per decision, Events,
// metrics, the drain). The state lives on the Node (protocol.go), so an agent
// killed at any point and restarted continues from the Node alone.
//
// Lifecycle of one node:
//
//	Idle ──(TERMINATE_ON_HOST_MAINTENANCE, preempted TRUE)──▶ Draining
//	Idle ──(notice ONGOING, where maintenance-event is not served: TPU)──▶ Draining
//	Idle ──(perform-maintenance=true, notice PENDING and can_reschedule)──▶ Draining (manual)
//	Draining ──(drain finished)──▶ Terminating
//	Draining (manual) ──(drain finished, performMaintenance accepted)──▶ Terminating
//	Draining (manual) ──(performMaintenance failed)──▶ Idle
//	Draining, Terminating ──(new boot ID: the VM stopped and came back)──▶ Idle
//	Draining, Terminating ──(every signal cleared, same boot: cancelled)──▶ Idle
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
	"strings"
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

	Preempted      bool
	PreemptedKnown bool

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
	// SliceAsk is the aggregator's ask that this host drain with its
	// multi-host slice, another host of which stops; SliceAskSet whether
	// the Node carries one.
	SliceAsk    protocol.SliceAsk
	SliceAskSet bool
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
	PreemptionDeadline time.Duration
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
}

// DefaultConfig is what Compute Engine documents.
var DefaultConfig = Config{HostMaintenanceDeadline: 60 * time.Minute, PreemptionDeadline: 30 * time.Second, ManualDrainTimeout: protocol.DefaultManualDrainTimeout,
	ManualStartTimeout: 15 * time.Minute, TriggerMaxAge: 5 * time.Minute, FailureCooldown: time.Hour, MaxFailureCooldown: 24 * time.Hour}

// withDefaults fills every zero field from DefaultConfig: a zero deadline
// would evict every pod at once.
func (c Config) withDefaults() Config {
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.HostMaintenanceDeadline, &DefaultConfig.HostMaintenanceDeadline},
		{&c.PreemptionDeadline, &DefaultConfig.PreemptionDeadline},
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
	// Compute Engine accepted a manual one).
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
}

// IsZero: no drain.
func (o DrainOrder) IsZero() bool { return o.For.IsZero() }

// Equal: the same drain.
func (o DrainOrder) Equal(p DrainOrder) bool {
	return o.For.Equal(p.For) && o.Deadline.Equal(p.Deadline) && o.Voluntary == p.Voluntary
}

// Step is the state machine. It is pure: the same inputs give the same
// decision, and applying a decision's state and stepping again with the
// same observation changes nothing more.
func Step(cfg Config, st State, obs Observation) Decision {
	if st.Phase == "" {
		st.Phase = protocol.PhaseIdle
	}
	d := Decision{State: st}
	sig := obs.Signals

	// 0. A reboot nothing announced: the agent was idle and the node came
	// back with another boot ID.
	if st.Phase == protocol.PhaseIdle && st.LastBootID != "" && obs.BootID != "" && obs.BootID != st.LastBootID {
		if obs.KubeletVersion != "" && st.LastKubelet != "" && obs.KubeletVersion != st.LastKubelet {
			d.Unannounced = counted(protocol.Upgrade)
			d.Events = append(d.Events, EventRecord{Reason: protocol.EventNodeUpgraded,
				Message: fmt.Sprintf("The node rebooted into kubelet %s (was %s): counted as a node upgrade", obs.KubeletVersion, st.LastKubelet)})
		} else {
			d.Unannounced = counted(protocol.UnannouncedReboot)
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventUnexpectedReboot,
				Message: fmt.Sprintf("The VM rebooted with no maintenance notice or preemption before it (boot ID %s, was %s): counted as a host error", obs.BootID, st.LastBootID)})
		}
	}

	// 1. Back from maintenance, or maintenance withdrawn.
	if st.Phase != protocol.PhaseIdle {
		booted := obs.BootID != "" && st.BootID != "" && obs.BootID != st.BootID
		cleared := sig.EventKnown && sig.Event == metadata.EventNone &&
			sig.PreemptedKnown && !sig.Preempted && sig.NoticeKnown
		switch {
		case st.Reason == protocol.ReasonSlice:
			// Drained for the slice: back when the aggregator withdraws
			// the ask (every host of the slice that stopped is back).
			cleared = !obs.SliceAskSet
		case st.Reason != protocol.ReasonManual:
			cleared = cleared && (!sig.NoticePresent && !sig.NoticeNotYet || sig.Notice.Status == metadata.StatusPending)
		case st.Phase == protocol.PhaseTerminating:
			// Compute Engine accepted the call: only a notice gone
			// without the VM stopping means it was withdrawn.
			cleared = cleared && !sig.NoticePresent && !sig.NoticeNotYet
		default:
			// Before Compute Engine has accepted, a quiet VM with a
			// pending notice is what a manual maintenance looks like.
			cleared = false
		}
		if booted || cleared {
			reason, msg := protocol.EventMaintenanceCleared, fmt.Sprintf("Node is back from %s (boot ID %s); removing the taint and the maintenance label", st.Reason, obs.BootID)
			warning := false
			switch {
			case !booted && st.Reason == protocol.ReasonSlice:
				reason, msg = protocol.EventSliceBack, "The multi-host slice is back in service (the aggregator withdrew its ask); so is this host"
			case !booted:
				reason, msg, warning = protocol.EventMaintenanceAborted, fmt.Sprintf("The %s was withdrawn before the VM stopped; putting the node back in service", st.Reason), true
			}
			d.Events = append(d.Events, EventRecord{Warning: warning, Reason: reason, Message: msg})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = st.RequestID != ""
			d.State = idleState(st)
			if booted {
				// The maintenance that took the VM down is over, and so is
				// its notice; a value still served after the reboot is a new
				// one (a notice still pending is mirrored again below).
				d.State.LastEvent = metadata.EventNone
				d.State.ScheduledTime, d.State.Notice = "", ""
			}
		}
	}

	// 2. Maintenance or preemption starts, or a preemption shortens an
	// ongoing drain. A manual drain that Compute Engine has not been asked
	// about yet becomes the maintenance that started on its own.
	now := obs.Now
	idle := d.State.Phase == protocol.PhaseIdle
	manualUnasked := d.State.Phase == protocol.PhaseDraining && d.State.Reason == protocol.ReasonManual && d.State.Requested.IsZero()
	// A manual drain not asked for yet, or a drain for the slice, becomes
	// this VM's own maintenance when one starts.
	adoptable := manualUnasked || !idle && d.State.Reason == protocol.ReasonSlice
	switch {
	case sig.PreemptedKnown && sig.Preempted:
		deadline := now.Add(cfg.PreemptionDeadline)
		if idle {
			d.start(obs, protocol.ReasonPreemption, deadline)
			d.Interruption = countedAs(protocol.ReasonPreemption)
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
				Message: fmt.Sprintf("The VM was preempted; draining before it stops at %s", deadline.UTC().Format(time.RFC3339))})
		} else if manual, slice := d.State.Reason == protocol.ReasonManual, d.State.Reason == protocol.ReasonSlice; d.State.Reason != protocol.ReasonPreemption && (deadline.Before(d.State.Deadline) || manual || slice) {
			if manual && d.State.Phase == protocol.PhaseDraining || slice {
				// Not counted yet: a manual maintenance counts once
				// Compute Engine accepts it, a slice's drain not at all.
				d.Interruption = countedAs(protocol.ReasonPreemption)
			}
			d.State.Reason = protocol.ReasonPreemption
			if deadline.Before(d.State.Deadline) {
				d.State.Deadline = deadline
			}
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventPreempted,
				Message: fmt.Sprintf("The VM was preempted during maintenance; the drain deadline moves to %s", d.State.Deadline.UTC().Format(time.RFC3339))})
		}
	case (idle || adoptable) && sig.EventKnown && sig.Event == metadata.EventTerminate:
		d.hostMaintenance(obs, now.Add(cfg.HostMaintenanceDeadline), protocol.EventTerminateOnHost, "Host maintenance will stop the VM; draining before %s")
	case (idle && sig.EventNotServed || adoptable) && sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == metadata.StatusOngoing:
		// Where maintenance-event is served, the drain starts on
		// TERMINATE_ON_HOST_MAINTENANCE (as GKE 1.33 does), not at the
		// window's start.
		d.hostMaintenance(obs, now.Add(cfg.HostMaintenanceDeadline), protocol.EventMaintenanceStarted, "The maintenance window has started; draining before %s")
	}
	if sig.EventKnown {
		if sig.Event == metadata.EventMigrate && d.State.LastEvent != metadata.EventMigrate {
			d.Migration = true
			d.Events = append(d.Events, EventRecord{Reason: protocol.EventMigrateOnHost,
				Message: "Compute Engine will live-migrate the VM; nothing to drain"})
		}
		d.State.LastEvent = sig.Event
	}

	// 3. The manual trigger.
	d.manual(cfg, obs)

	// 3a. The slice: drain with it (after the trigger, so that a host whose
	// own pending maintenance is taken with the slice's starts that
	// maintenance), or by its earlier deadline.
	if ask := obs.SliceAsk; obs.SliceAskSet {
		switch {
		case d.State.Phase == protocol.PhaseIdle:
			d.start(obs, protocol.ReasonSlice, ask.Deadline)
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDrain,
				Message: fmt.Sprintf("Host %s of the multi-host slice %s stops (%s); its job cannot run without it, so this host drains with it, before %s",
					ask.Cause, ask.Slice, ask.Reason, ask.Deadline.UTC().Format(time.RFC3339))})
		case ask.Deadline.Before(d.State.Deadline):
			d.State.Deadline = ask.Deadline
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventSliceDeadline,
				Message: fmt.Sprintf("Host %s of the multi-host slice %s stops first (%s); this host's drain deadline moves to %s",
					ask.Cause, ask.Slice, ask.Reason, ask.Deadline.UTC().Format(time.RFC3339))})
		}
	}

	// 4. Draining finished. A manual maintenance is finished when Compute
	// Engine accepts it (above).
	if d.State.Phase == protocol.PhaseDraining && d.State.Reason != protocol.ReasonManual && obs.DrainDone {
		d.State.Phase = protocol.PhaseTerminating
		d.Drained = true
		msg := fmt.Sprintf("All pods were stopped; the node is ready for the VM to stop (deadline %s)", d.State.Deadline.UTC().Format(time.RFC3339))
		if d.State.Reason == protocol.ReasonSlice {
			msg = "All pods were stopped; the host waits for its multi-host slice to come back"
		}
		d.Events = append(d.Events, EventRecord{Reason: protocol.EventEvictionComplete, Message: msg})
	}

	// 5. Mirror the notice.
	if sig.NoticeKnown {
		d.mirrorNotice(sig)
	}

	// 6. What the node runs, and what interrupted it.
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

	// 7. The drain: running while the node drains and its drain is not
	// done (a manual drain that is done waits for Compute Engine).
	if d.State.Phase == protocol.PhaseDraining && !(obs.DrainDone && d.State.Started.Equal(st.Started)) {
		// A slice drains as its cause does: voluntarily for a manual or
		// opportunistic maintenance.
		manual := d.State.Reason == protocol.ReasonManual || d.State.Reason == protocol.ReasonSlice && obs.SliceAsk.Reason == protocol.ReasonManual
		d.Drain = DrainOrder{For: d.State.Started, Deadline: d.State.Deadline, Voluntary: manual && !cfg.ManualDrainEscalate}
	}

	// 8. A voluntary maintenance that failed is remembered, for the
	// aggregator's cool-down; one that went through clears the record.
	switch {
	case voluntaryFailure(d.Manual):
		d.State.Failures = nextFailures(cfg, d.State.Failures, d.Manual, obs.Now)
	case d.Manual == protocol.ManualAccepted:
		d.State.Failures = protocol.Failures{}
	}

	// 9. Idleness, for the aggregator.
	if obs.PodsKnown {
		if obs.Idle {
			if d.State.IdleSince.IsZero() {
				d.State.IdleSince = obs.Now
			}
			d.State.Busy = ""
		} else {
			d.State.IdleSince, d.State.Busy = time.Time{}, obs.Busy
		}
	}
	return d
}

// hostMaintenance starts a host maintenance on an idle node, or turns a
// manual drain not yet asked for into one (keeping the earlier deadline).
func (d *Decision) hostMaintenance(obs Observation, deadline time.Time, reason, format string) {
	if d.State.Phase == protocol.PhaseIdle {
		d.start(obs, protocol.ReasonHostMaintenance, deadline)
	} else {
		d.State.Reason = protocol.ReasonHostMaintenance
		if deadline.Before(d.State.Deadline) {
			d.State.Deadline = deadline
		}
	}
	d.Interruption = countedAs(protocol.ReasonHostMaintenance)
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: reason,
		Message: fmt.Sprintf(format, d.State.Deadline.UTC().Format(time.RFC3339))})
}

// manual handles the perform-maintenance label and the performMaintenance
// call of a manual maintenance.
func (d *Decision) manual(cfg Config, obs Observation) {
	sig := obs.Signals
	st := d.State
	switch {
	case st.Phase == protocol.PhaseIdle:
		if !obs.TriggerSet || d.RemoveTrigger {
			return
		}
		if obs.Trigger == protocol.TriggerValue && !sig.NoticeKnown {
			return // wait until the metadata server has answered
		}
		answer := triggerCheck(cfg, st, obs).Answer()
		switch {
		case answer.Wait:
			return // re-checked once the pods are known
		case !answer.Accepted():
			d.reject(answer.Outcome, answer.Message)
		default:
			n := sig.Notice
			deadline := obs.Now.Add(cfg.ManualDrainTimeout)
			d.start(obs, protocol.ReasonManual, deadline)
			d.State.RequestID = obs.RequestID
			d.Manual = protocol.ManualStarted
			who := protocol.LabelPerformMaintenance + "=true"
			if obs.Opportunistic {
				who = "Picked for opportunistic maintenance (" + who + ")"
			}
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualStarted,
				Message: fmt.Sprintf("%s: draining the node before %s, then asking Compute Engine to start the maintenance scheduled for %s now",
					who, deadline.UTC().Format(time.RFC3339), n.WindowStart.UTC().Format(time.RFC3339))})
		}
	case st.RequestID == "":
		// A maintenance the label did not start.
		if obs.TriggerSet {
			answer := triggerCheck(cfg, st, obs).Answer()
			d.reject(answer.Outcome, answer.Message)
		}
	default: // a maintenance the label started
		if obs.TriggerSet && obs.Trigger != protocol.TriggerValue {
			d.reject(protocol.ManualInvalidValue, fmt.Sprintf("The label %s=%q is not accepted: the only accepted value is %q. The manual maintenance already under way goes on.",
				protocol.LabelPerformMaintenance, obs.Trigger, protocol.TriggerValue))
		}
		if st.Reason == protocol.ReasonManual && st.Phase == protocol.PhaseTerminating && !underWay(sig) {
			d.awaitStart(cfg, obs)
			return
		}
		if st.Reason != protocol.ReasonManual || st.Phase != protocol.PhaseDraining {
			return
		}
		switch r := obs.Perform; {
		case r != nil && r.RequestID == st.RequestID && r.Err == nil:
			d.accept(cfg, obs.Now, "operation "+r.Operation)
		case r != nil && r.RequestID == st.RequestID && underWay(sig):
			// No answer in time, or a refusal because Compute Engine had
			// already begun: the maintenance is starting either way, and
			// the node must not go back in service.
			d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
		case r != nil && r.RequestID == st.RequestID:
			d.Manual = r.Outcome
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualFailed,
				Message: fmt.Sprintf("Compute Engine did not start the maintenance: %v. The node is back in service (taint, maintenance label and %s removed).", r.Err, protocol.LabelPerformMaintenance)})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = true
			d.State = idleState(st)
		case !st.Requested.IsZero() && startedByCompute(sig):
			// Asked before (by this agent or one before it): the signals
			// show the request went through; never ask twice.
			d.accept(cfg, obs.Now, "the metadata server shows the maintenance starting")
		case st.Requested.IsZero() && sig.NoticeKnown && !(sig.NoticePresent && sig.Notice.Status == metadata.StatusPending && sig.Notice.CanReschedule):
			// Before asking: the notice is gone or can no longer be
			// started early, so there is nothing to ask for.
			d.Manual = protocol.ManualNotReschedulable
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualFailed,
				Message: fmt.Sprintf("The maintenance can no longer be started early (the notice is gone or no longer reschedulable); Compute Engine was not asked. The node is back in service (taint, maintenance label and %s removed).", protocol.LabelPerformMaintenance)})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = true
			d.State = idleState(st)
		case obs.DrainDone && len(obs.DrainLeft) > 0 && st.Requested.IsZero() && !cfg.ManualDrainEscalate:
			// Voluntary: the budgets held to the end, or pods are stuck.
			d.Manual = protocol.ManualAbandoned
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualAbandoned,
				Message: fmt.Sprintf("The drain could not finish by its deadline %s: %d pod(s) are still on the node (PodDisruptionBudgets that never allowed their eviction, or pods stuck terminating): %s. This maintenance is voluntary, so no pod was deleted and Compute Engine was not asked; the node is back in service (taint, maintenance label and %s removed).",
					st.Deadline.UTC().Format(time.RFC3339), len(obs.DrainLeft), excerpt(obs.DrainLeft, 5), protocol.LabelPerformMaintenance)})
			d.Uncordon = !st.CordonedBefore
			d.RemoveTrigger = true
			d.State = idleState(st)
		case obs.DrainDone && sig.EventKnown && sig.PreemptedKnown && sig.NoticeKnown:
			d.Perform = true
			if st.Requested.IsZero() {
				d.State.Requested = obs.Now
			}
		}
	}
}

// triggerCheck is what the agent knows of the trigger, for
// protocol.TriggerCheck.Answer.
func triggerCheck(cfg Config, st State, obs Observation) protocol.TriggerCheck {
	return protocol.TriggerCheck{Value: obs.Trigger, State: st, Notice: obs.Signals.Notice, NoticePresent: obs.Signals.NoticePresent,
		Opportunistic: obs.Opportunistic, TriggeredAt: obs.TriggeredAt, TriggerFor: obs.TriggerFor, PodsKnown: obs.PodsKnown,
		Idle: obs.Idle, Busy: obs.Busy, MaxAge: cfg.TriggerMaxAge, Now: obs.Now, Blocked: obs.ManualBlocked, BlockedDetail: obs.ManualBlockedDetail}
}

// awaitStart: Compute Engine accepted the call and the maintenance has not
// begun. If the call's operation failed, or the maintenance has not begun
// ManualStartTimeout after the acceptance, the node goes back in service;
// otherwise the loop wakes at that bound. The acceptance time is the
// deadline accept set, less HostMaintenanceDeadline.
func (d *Decision) awaitStart(cfg Config, obs Observation) {
	st := d.State
	r := obs.Perform
	startBy := st.Deadline.Add(cfg.ManualStartTimeout - cfg.HostMaintenanceDeadline)
	var why string
	switch {
	case r != nil && r.RequestID == st.RequestID && r.OperationErr != nil:
		why = fmt.Sprintf("its operation failed: %v", r.OperationErr)
	case st.Deadline.IsZero():
		return
	case !obs.Now.Before(startBy):
		why = fmt.Sprintf("the maintenance has not begun %s after Compute Engine accepted the request", cfg.ManualStartTimeout)
	default:
		d.WakeAt = startBy
		return
	}
	d.Manual = protocol.ManualNotStarted
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualNotStarted,
		Message: fmt.Sprintf("Compute Engine accepted the request to start the maintenance now, but %s. The node is back in service (taint, maintenance label and %s removed); the maintenance stays pending.", why, protocol.LabelPerformMaintenance)})
	d.Uncordon = !st.CordonedBefore
	d.RemoveTrigger = true
	d.State = idleState(st)
}

// startedByCompute: the signals show that Compute Engine has taken the
// maintenance in hand.
// A notice that is still PENDING but no longer reschedulable is taken as
// the answer to the agent's own request (which is how Compute Engine
// answers it first).
func startedByCompute(sig Signals) bool {
	return underWay(sig) || sig.NoticeKnown && sig.NoticePresent && !sig.Notice.CanReschedule
}

// underWay: the maintenance itself has begun.
func underWay(sig Signals) bool {
	return sig.EventKnown && sig.Event == metadata.EventTerminate ||
		sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == metadata.StatusOngoing
}

// accept: Compute Engine accepted the manual maintenance; the node is
// drained and waits for the VM to stop.
func (d *Decision) accept(cfg Config, now time.Time, how string) {
	d.State.Phase = protocol.PhaseTerminating
	d.State.Deadline = now.Add(cfg.HostMaintenanceDeadline)
	d.Drained = true
	d.Manual = protocol.ManualAccepted
	d.Interruption = countedAs(protocol.ReasonManual)
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventManualAccepted,
		Message: fmt.Sprintf("Compute Engine accepted the request to start the maintenance now (%s); the node is drained, awaiting node termination", how)})
}

// reject answers a perform-maintenance label the agent does not act on.
func (d *Decision) reject(outcome, msg string) {
	d.RemoveTrigger = true
	d.Manual = outcome
	d.Events = append(d.Events, EventRecord{Warning: true, Reason: protocol.EventManualRejected,
		Message: msg + " The label was removed; nothing else changed."})
}

// idleState is st back in service: what outlives a maintenance, nothing else.
func idleState(st State) State {
	return State{Phase: protocol.PhaseIdle, ScheduledTime: st.ScheduledTime, Notice: st.Notice, LastEvent: st.LastEvent,
		IdleSince: st.IdleSince, Busy: st.Busy, Interruptions: st.Interruptions, LastBootID: st.LastBootID, LastKubelet: st.LastKubelet,
		Failures: st.Failures}
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

// formatTime is t in RFC 3339, or "(unknown)" when zero.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "(unknown)"
	}
	return t.UTC().Format(time.RFC3339)
}

// excerpt joins at most n names, saying how many more there are.
func excerpt(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// voluntaryFailure: the outcome is a voluntary maintenance that Compute
// Engine did not start or the drain gave up, which the aggregator should
// not try again at once (a rejected label is not one).
func voluntaryFailure(outcome string) bool {
	switch outcome {
	case protocol.ManualFailed, protocol.ManualPermissionDenied, protocol.ManualRefused, protocol.ManualNotStarted, protocol.ManualAbandoned:
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
