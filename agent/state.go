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
//	Idle ──(TERMINATE_ON_HOST_MAINTENANCE, notice ONGOING, preempted TRUE)──▶ Draining
//	Draining ──(drain finished)──▶ Terminating
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
// maintenance started (AnnotationCordonedBefore).

import (
	"fmt"
	"strconv"
	"time"

	"github.com/maintenance-handler/maintenance-handler/metadata"
)

// Phase is where a node is in its maintenance lifecycle.
type Phase string

const (
	PhaseIdle        Phase = "Idle"
	PhaseDraining    Phase = "Draining"
	PhaseTerminating Phase = "Terminating"
)

// Reason is why maintenance started.
type Reason string

const (
	ReasonHostMaintenance Reason = "host-maintenance"
	ReasonPreemption      Reason = "preemption"
)

// Interruption types and reasons (the design's taxonomy, GKE's spelling).
const (
	InterruptionMaintenance = "MaintenanceEvent"
	InterruptionPreemption  = "PreemptionEvent"
	ReasonHWSWMaintenance   = "HW/SW Maintenance"
	ReasonEviction          = "Eviction"
)

// Event reasons, GKE's own where one fits (gce-facts.md §4.4).
const (
	EventMaintenanceScheduled   = "MaintenanceWindowScheduled"
	EventMaintenanceRescheduled = "MaintenanceWindowRescheduled"
	EventMaintenanceCancelled   = "MaintenanceWindowCancelled"
	EventMaintenanceStarted     = "MaintenanceWindowStarted"
	EventTerminateOnHost        = "TerminateOnHostMaintenance"
	EventPreempted              = "NodePreempted"
	EventMigrateOnHost          = "MigrateOnHostMaintenance"
	EventEvictionComplete       = "PodEvictionComplete"
	EventMaintenanceCleared     = "MaintenanceWindowCleared"
	EventMaintenanceAborted     = "MaintenanceCancelledBeforeStop"
)

// State is what the agent keeps on its Node.
type State struct {
	Phase  Phase
	Reason Reason
	// Started and Deadline are set while Draining or Terminating.
	Started, Deadline time.Time
	// BootID is the node's boot ID when maintenance started.
	BootID string
	// CordonedBefore: spec.unschedulable was set before maintenance began.
	CordonedBefore bool
	// ScheduledTime is the scheduled-maintenance-time label ("" if absent).
	ScheduledTime string
	// Notice is the upcoming-maintenance annotation ("" if absent).
	Notice string
	// LastEvent is the last maintenance-event value acted on.
	LastEvent metadata.Event
}

// Signals is what the metadata server last said, key by key.
type Signals struct {
	Event      metadata.Event
	EventKnown bool

	Preempted      bool
	PreemptedKnown bool

	Notice        metadata.Notice
	NoticePresent bool
	NoticeKnown   bool
}

// Observation is everything Step looks at besides the state.
type Observation struct {
	Now     time.Time
	Signals Signals
	// BootID is the node's status.nodeInfo.bootID now.
	BootID string
	// Unschedulable is the node's spec.unschedulable now.
	Unschedulable bool
	// DrainDone: the drain of the current maintenance has finished.
	DrainDone bool
}

// Config holds the deadlines.
type Config struct {
	// HostMaintenanceDeadline is how long after TERMINATE_ON_HOST_MAINTENANCE
	// (or a notice turning ONGOING) the VM is expected to stop: 60 min for
	// GPU VMs.
	HostMaintenanceDeadline time.Duration
	// PreemptionDeadline is how long after preempted=TRUE the VM stops: 30 s.
	PreemptionDeadline time.Duration
}

// DefaultConfig is what Compute Engine documents.
var DefaultConfig = Config{HostMaintenanceDeadline: 60 * time.Minute, PreemptionDeadline: 30 * time.Second}

// EventRecord is a Kubernetes Event to emit on the Node.
type EventRecord struct {
	Warning bool
	Reason  string
	Message string
}

// Interruption is one interruption to count.
type Interruption struct {
	Type, Reason string
}

// Decision is the outcome of one Step.
type Decision struct {
	State  State
	Events []EventRecord
	// Interruption is set when a new maintenance or preemption began.
	Interruption *Interruption
	// Migration is set when live migration was announced.
	Migration bool
	// Cordon sets spec.unschedulable; Uncordon clears it.
	Cordon, Uncordon bool
	// Drained is set when the drain finished (Draining to Terminating).
	Drained bool
}

// Step is the state machine. It is pure: the same inputs give the same
// decision, and applying a decision's state and stepping again with the
// same observation changes nothing more.
func Step(cfg Config, st State, obs Observation) Decision {
	if st.Phase == "" {
		st.Phase = PhaseIdle
	}
	d := Decision{State: st}
	sig := obs.Signals

	// 1. Back from maintenance, or maintenance withdrawn.
	if st.Phase != PhaseIdle {
		booted := obs.BootID != "" && st.BootID != "" && obs.BootID != st.BootID
		cleared := sig.EventKnown && sig.Event == metadata.EventNone &&
			sig.PreemptedKnown && !sig.Preempted &&
			sig.NoticeKnown && (!sig.NoticePresent || sig.Notice.Status == metadata.StatusPending)
		if booted || cleared {
			reason, msg := EventMaintenanceCleared, fmt.Sprintf("Node is back from %s (boot ID %s); removing the taint and the maintenance label", st.Reason, obs.BootID)
			warning := false
			if !booted {
				reason, msg, warning = EventMaintenanceAborted, fmt.Sprintf("The %s was withdrawn before the VM stopped; putting the node back in service", st.Reason), true
			}
			d.Events = append(d.Events, EventRecord{Warning: warning, Reason: reason, Message: msg})
			d.Uncordon = !st.CordonedBefore
			d.State = State{Phase: PhaseIdle, ScheduledTime: st.ScheduledTime, Notice: st.Notice, LastEvent: st.LastEvent}
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
	// ongoing drain.
	now := obs.Now
	switch {
	case sig.PreemptedKnown && sig.Preempted:
		deadline := now.Add(cfg.PreemptionDeadline)
		if d.State.Phase == PhaseIdle {
			d.start(obs, ReasonPreemption, deadline)
			d.Interruption = &Interruption{Type: InterruptionPreemption, Reason: ReasonEviction}
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: EventPreempted,
				Message: fmt.Sprintf("The VM was preempted; draining before it stops at %s", deadline.UTC().Format(time.RFC3339))})
		} else if d.State.Reason != ReasonPreemption && deadline.Before(d.State.Deadline) {
			d.State.Reason = ReasonPreemption
			d.State.Deadline = deadline
			d.Events = append(d.Events, EventRecord{Warning: true, Reason: EventPreempted,
				Message: fmt.Sprintf("The VM was preempted during maintenance; the drain deadline moves to %s", deadline.UTC().Format(time.RFC3339))})
		}
	case d.State.Phase == PhaseIdle && sig.EventKnown && sig.Event == metadata.EventTerminate && d.State.LastEvent != metadata.EventTerminate:
		deadline := now.Add(cfg.HostMaintenanceDeadline)
		d.start(obs, ReasonHostMaintenance, deadline)
		d.Interruption = &Interruption{Type: InterruptionMaintenance, Reason: ReasonHWSWMaintenance}
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: EventTerminateOnHost,
			Message: fmt.Sprintf("Host maintenance will stop the VM; draining before %s", deadline.UTC().Format(time.RFC3339))})
	case d.State.Phase == PhaseIdle && sig.NoticeKnown && sig.NoticePresent && sig.Notice.Status == metadata.StatusOngoing:
		deadline := now.Add(cfg.HostMaintenanceDeadline)
		d.start(obs, ReasonHostMaintenance, deadline)
		d.Interruption = &Interruption{Type: InterruptionMaintenance, Reason: ReasonHWSWMaintenance}
		d.Events = append(d.Events, EventRecord{Warning: true, Reason: EventMaintenanceStarted,
			Message: fmt.Sprintf("The maintenance window has started; draining before %s", deadline.UTC().Format(time.RFC3339))})
	}
	if sig.EventKnown {
		if sig.Event == metadata.EventMigrate && d.State.LastEvent != metadata.EventMigrate {
			d.Migration = true
			d.Events = append(d.Events, EventRecord{Reason: EventMigrateOnHost,
				Message: "Compute Engine will live-migrate the VM; nothing to drain"})
		}
		d.State.LastEvent = sig.Event
	}

	// 3. Draining finished.
	if d.State.Phase == PhaseDraining && obs.DrainDone && d.Interruption == nil {
		d.State.Phase = PhaseTerminating
		d.Drained = true
		d.Events = append(d.Events, EventRecord{Reason: EventEvictionComplete,
			Message: fmt.Sprintf("All pods were stopped; the node is ready for the VM to stop (deadline %s)", d.State.Deadline.UTC().Format(time.RFC3339))})
	}

	// 4. Mirror the notice.
	if sig.NoticeKnown {
		d.mirrorNotice(sig)
	}
	return d
}

func (d *Decision) start(obs Observation, reason Reason, deadline time.Time) {
	d.State.Phase = PhaseDraining
	d.State.Reason = reason
	d.State.Started = obs.Now
	d.State.Deadline = deadline
	d.State.BootID = obs.BootID
	d.State.CordonedBefore = obs.Unschedulable
	d.Cordon = true
	d.Uncordon = false
}

func (d *Decision) mirrorNotice(sig Signals) {
	prevTime := d.State.ScheduledTime
	if !sig.NoticePresent {
		if d.State.Notice != "" || prevTime != "" {
			d.State.Notice, d.State.ScheduledTime = "", ""
			if prevTime != "" && d.State.Phase == PhaseIdle {
				d.Events = append(d.Events, EventRecord{Reason: EventMaintenanceCancelled,
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
		d.Events = append(d.Events, EventRecord{Reason: EventMaintenanceScheduled,
			Message: fmt.Sprintf("Maintenance is scheduled for %s (can reschedule: %t)", when, n.CanReschedule)})
	} else {
		d.Events = append(d.Events, EventRecord{Reason: EventMaintenanceRescheduled,
			Message: fmt.Sprintf("Maintenance was rescheduled to %s", when)})
	}
}
