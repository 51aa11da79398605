package lifecycle

// The state machine's frame: what Step reads (Observation, Signals,
// Config), what it returns (Decision, DrainOrder), and Step itself, which
// reads as its sub-steps in order. Each kind of maintenance is a file of
// its own: host.go (host maintenance and the open window), preemption.go,
// manual.go (the perform-maintenance sub-machine; manualcheck.go its
// acceptance check), slice.go (a multi-host slice; slicehosts.go the rules
// the agent and the aggregator share), fault.go (a fault's repair),
// knownend.go (a VM whose end is known), gke.go (GKE's own handler),
// back.go (back in service and counting) and notice.go (the notice's
// mirror and the node conditions). What sets each reason apart is its reasonRule,
// beside its cases; rules.go holds the table's frame.

import (
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// State is what the agent keeps on its Node (package protocol encodes
// it).
type State = protocol.AgentState

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
	// ReportTimeout bounds how long the agent follows a fault report's
	// operation from the call: Google's "Report faulty host" keeps the VM
	// RUNNING through the operation ("usually 10-12 minutes") and starts
	// the host's repair, which stops the VM, within a minute after. The
	// default, 30 min, is that and a margin of more than half as long
	// again. Past it, with the operation still RUNNING, the repair has
	// failed, and the next attempt follows that operation rather than
	// reporting again.
	ReportTimeout time.Duration
	// GKERepairTimeout bounds the time from GKE's fault-behavior label to
	// GKE's status showing the report under way: past it, the repair has
	// failed.
	GKERepairTimeout time.Duration
	// KnownEndLead is how long before the VM's known end its drain
	// starts (the drain's deadline is the end itself).
	KnownEndLead time.Duration
	// IgnoreGKEHandler: the agent handles every maintenance itself, even
	// one GKE's own handler is seen handling. False (the default): such a
	// maintenance is left to GKE's handler (leaveToGKE).
	IgnoreGKEHandler bool
}

// DefaultConfig is what Compute Engine documents.
var DefaultConfig = Config{HostMaintenanceDeadline: 60 * time.Minute, PreemptionDeadline: 30 * time.Second, OngoingDeadline: 5 * time.Minute, ManualDrainTimeout: DefaultManualDrainTimeout,
	ManualStartTimeout: 15 * time.Minute, GKERepairTimeout: 30 * time.Minute, ReportTimeout: 30 * time.Minute, KnownEndLead: 60 * time.Minute, TriggerMaxAge: 5 * time.Minute, FailureCooldown: time.Hour, MaxFailureCooldown: 24 * time.Hour}

// WithDefaults fills every zero field from DefaultConfig: a zero deadline
// would evict every pod at once.
func (c Config) WithDefaults() Config {
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.HostMaintenanceDeadline, &DefaultConfig.HostMaintenanceDeadline},
		{&c.PreemptionDeadline, &DefaultConfig.PreemptionDeadline},
		{&c.OngoingDeadline, &DefaultConfig.OngoingDeadline},
		{&c.ManualDrainTimeout, &DefaultConfig.ManualDrainTimeout},
		{&c.ManualStartTimeout, &DefaultConfig.ManualStartTimeout},
		{&c.GKERepairTimeout, &DefaultConfig.GKERepairTimeout},
		{&c.ReportTimeout, &DefaultConfig.ReportTimeout},
		{&c.KnownEndLead, &DefaultConfig.KnownEndLead},
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
	// GKEWrites: GKE's own handler writes an Event of this reason about
	// the node itself (Decision.leaveEventsToGKE): the agent logs it and
	// records none.
	GKEWrites bool
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
	// RemoveRepair removes the aggregator's approval of the node's repair
	// (the repair is over), and Repair is the repair's outcome to count,
	// if any (a protocol.Repair* value).
	RemoveRepair bool
	Repair       string
	// RemoveReport removes a person's request for the node's repair
	// (protocol.LabelReportFaulty): the node is repaired.
	RemoveReport bool
	// FaultBehavior, when set, is GKE's fault-behavior label to put on
	// the Node (GKE's report-and-replace flow asked for); RemoveFaultBehavior
	// removes it (that flow failed).
	FaultBehavior       string
	RemoveFaultBehavior bool
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
// same observation changes nothing more. before is the state the step
// starts from; the sub-steps change the decision's copy of it, and the few
// that compare with where the step began take before by name. What was
// observed is settled once, before the first sub-step (settle), and read
// only after.
//
// The order of the sub-steps is part of the rules:
//  0. What was learnt of the node's Compute Engine call is recorded
//     first (trackCall): the call is the node's, whatever maintenance
//     ends, takes over or starts in the same step, and every call site
//     asks mayCall whether it may call.
//  1. What ended (an unannounced reboot, the node back in service) comes
//     first, so that a maintenance starting in the same step starts on an
//     idle node.
//  2. The VM's own maintenance or preemption (host.go, preemption.go)
//     comes before the trigger and the slice, which yield to it.
//  3. The trigger (manual.go) comes before the slice's ask (slice.go): a
//     host whose own pending maintenance is taken with its slice's starts
//     that maintenance instead.
//  4. GKE's handler (gke.go) is asked after every start, so that a
//     maintenance started in this step is left to it at once; then the
//     VM's known end (knownend.go), which GKE's handler does not drain
//     for: it starts on a node that is idle at the end of the step (a
//     maintenance may have ended in it), takes over one that yields to
//     the VM's own, and moves a later deadline to the end.
//  5. The drain's end is read for the maintenance now under way, and the
//     notice mirrored after the node came back (which retires the notice
//     of the maintenance that stopped the VM).
//  6. Counting, the drain to run, the failure memory and idleness read the
//     decision made above.
func Step(cfg Config, before State, observed Observation) Decision {
	if before.Phase == "" {
		before.Phase = protocol.PhaseIdle
	}
	obs := settle(observed)
	d := Decision{State: before}
	d.sliceAskLimit(obs)
	d.trackCall(cfg, obs) // call.go
	d.unannouncedReboot(before, obs)
	d.backInService(cfg, obs)
	d.repairBack(before, obs)
	d.maintenanceStarts(cfg, obs)
	d.migration(obs.Signals)
	d.sliceTurnsForced(obs)
	d.manual(cfg, obs)
	d.fault(cfg, obs)
	d.followSlice(cfg, obs)
	d.leaveToGKE(cfg, before, obs)
	d.knownEnd(cfg, obs)
	d.drained(cfg, obs)
	if obs.Signals.NoticeKnown {
		d.mirrorNotice(obs.Signals)
	}
	d.manualHappened(before, obs)
	d.count(obs)
	d.drainOrder(cfg, obs)
	d.rememberFailure(cfg, obs.Now)
	d.idleness(obs)
	d.leaveEventsToGKE(obs)
	return d
}

// settle is what a step reads of what was observed: a slice's ask whose
// cause started SliceDrainLimit ago or more is no longer followed
// (SliceAskExpired).
func settle(obs Observation) Observation {
	if obs.SliceAskSet && !obs.Now.Before(obs.SliceAsk.Started.Add(SliceDrainLimit)) {
		obs.SliceAskSet, obs.SliceAskExpired = false, true
	}
	return obs
}

// wakeAt asks for a step at t, or earlier if another sub-step asked so.
func (d *Decision) wakeAt(t time.Time) {
	if d.WakeAt.IsZero() || t.Before(d.WakeAt) {
		d.WakeAt = t
	}
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

// idleState is st back in service: what outlives a maintenance, nothing else.
func idleState(st State) State {
	return State{Phase: protocol.PhaseIdle, ScheduledTime: st.ScheduledTime, Notice: st.Notice, LastEvent: st.LastEvent,
		IdleSince: st.IdleSince, Busy: st.Busy, PodGroups: st.PodGroups, Interruptions: st.Interruptions, LastBootID: st.LastBootID, LastKubelet: st.LastKubelet,
		Failures: st.Failures, NoticeForeign: st.NoticeForeign, LastRepair: st.LastRepair, KnownEnd: st.KnownEnd, Call: st.Call}
}

// drainOrder: the drain runs while the node drains and the drain its
// maintenance orders now is not done (a drain that is done and waits for
// Compute Engine is not run again; one whose order changed is);
// voluntary as its reason says (reasonRule.voluntary), unless the
// configuration escalates manual drains. While it runs, the state says
// nothing of how a drain ended.
func (d *Decision) drainOrder(cfg Config, obs Observation) {
	if d.State.Phase != protocol.PhaseDraining || d.State.LeftToGKE || d.drainDone(cfg, obs) {
		return
	}
	d.Drain = d.order(cfg, obs)
	d.State.Drain = ""
}

// order is the drain the maintenance under way orders now: for its start,
// by its deadline, as voluntary as its reason is.
func (d *Decision) order(cfg Config, obs Observation) DrainOrder {
	return DrainOrder{For: d.State.Started, Deadline: d.State.Deadline, Voluntary: voluntaryDrain(cfg, d.State, obs), Reason: d.State.Reason}
}

// drainDone: the node drains and the drain its maintenance orders now ran
// to its end (obs.DrainEnded). "Done" is the whole order's: a drain that
// ended for another deadline, or voluntarily for a maintenance that has
// since turned forced, is not this one, and a maintenance that starts in
// the step another ended has a drain of its own to run.
func (d *Decision) drainDone(cfg Config, obs Observation) bool {
	return d.State.Phase == protocol.PhaseDraining && !obs.DrainEnded.IsZero() && obs.DrainEnded.Equal(d.order(cfg, obs))
}

// voluntaryDrain: st's drain keeps to the PodDisruptionBudgets to its end,
// as its reason says (reasonRule.voluntary), unless the configuration
// escalates manual drains.
func voluntaryDrain(cfg Config, st State, obs Observation) bool {
	return ruleOf(st.Reason).voluntary(obs) && !cfg.ManualDrainEscalate
}
