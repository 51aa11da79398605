package lifecycle

import (
	"fmt"
	"strconv"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// DefaultManualDrainTimeout is the drain deadline of a manual or
// opportunistic maintenance, counted from its trigger being accepted (the
// agent's --manual-drain-timeout; 1 h, as for node upgrades).
const DefaultManualDrainTimeout = time.Hour

// TriggerCheck is what a node's agent looks at when it answers the
// perform-maintenance label (LabelPerformMaintenance). The agent answers
// with it, and `kubectl gce-maintenance trigger` checks with it first, from
// what the Node shows.
type TriggerCheck struct {
	// Value is the label's value.
	Value string
	// State is the agent's state on the Node.
	State protocol.AgentState
	// Notice is the maintenance notice the metadata server serves, if
	// NoticePresent.
	Notice        maintenance.Notice
	NoticePresent bool
	// Opportunistic: the aggregator set the label (AnnotationMaintenanceState
	// says opportunistic-triggered), at TriggeredAt (zero when it cannot be
	// read), for the notice whose scheduled-maintenance-time is TriggerFor;
	// it holds only while the node is idle (PodsKnown, Idle; Busy says what
	// runs) and the trigger is at most MaxAge old at Now.
	Opportunistic bool
	TriggeredAt   time.Time
	TriggerFor    string
	PodsKnown     bool
	Idle          bool
	Busy          string
	MaxAge        time.Duration
	Now           time.Time
	// LiveMigrates: the VM live-migrates on host maintenance.
	LiveMigrates bool
	// Blocked is why the maintenance policy refuses a manual trigger now
	// (a Manual* outcome; "" when it does not), BlockedDetail says it in
	// words.
	Blocked, BlockedDetail string
}

// TriggerAnswer is the agent's answer to the label on a node in service.
type TriggerAnswer struct {
	// Wait: it cannot answer yet (an opportunistic trigger before the
	// node's pods are known); nothing changes.
	Wait bool
	// Outcome is "" when the trigger is accepted, or the Manual* outcome
	// that refuses it, with Message saying why in words.
	Outcome, Message string
}

// Accepted: the agent starts the maintenance.
func (a TriggerAnswer) Accepted() bool { return !a.Wait && a.Outcome == "" }

// Answer is the agent's answer to the label: a pure function of c. The
// label is accepted only as "true", only on a node in service whose VM
// stops for host maintenance (a VM that live-migrates is not drained for
// it), only with a
// notice that is PENDING and can_reschedule, and only while the
// maintenance policy allows manual maintenance now; an opportunistic one
// also only while the node is idle, the trigger fresh, and the notice the
// one it was written for.
func (c TriggerCheck) Answer() TriggerAnswer {
	refuse := func(outcome, format string, args ...any) TriggerAnswer {
		return TriggerAnswer{Outcome: outcome, Message: fmt.Sprintf(format, args...)}
	}
	n := c.Notice
	switch {
	case c.State.Active():
		return refuse(protocol.ManualAlreadyOngoing, "A %s is already under way on this node (%s since %s); %s is not needed.",
			c.State.Reason, c.State.Phase, c.State.Started.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance)
	case c.Value != protocol.TriggerValue:
		return refuse(protocol.ManualInvalidValue, "The label %s=%q is not accepted: the only accepted value is %q.", protocol.LabelPerformMaintenance, c.Value, protocol.TriggerValue)
	case c.LiveMigrates:
		return refuse(protocol.ManualLiveMigrates, "This VM live-migrates on host maintenance (its instance/scheduling/on-host-maintenance is MIGRATE): the maintenance does not stop it, so it is not drained for, and %s is not needed.", protocol.LabelPerformMaintenance)
	case !c.NoticePresent:
		return refuse(protocol.ManualNoNotice, "%s=true needs a pending maintenance notice (upcoming-maintenance PENDING, can_reschedule true), and the metadata server reports none for this VM.", protocol.LabelPerformMaintenance)
	case n.Status == maintenance.StatusOngoing:
		return refuse(protocol.ManualAlreadyOngoing, "The maintenance is already ONGOING; %s=true is accepted only while it is PENDING.", protocol.LabelPerformMaintenance)
	case n.Status != maintenance.StatusPending:
		return refuse(protocol.ManualNotReschedulable, "The maintenance notice's status is %q; %s=true is accepted only while it is PENDING with can_reschedule true.", n.RawStatus, protocol.LabelPerformMaintenance)
	case !n.CanReschedule:
		return refuse(protocol.ManualNotReschedulable, "The maintenance scheduled for %s cannot be rescheduled (can_reschedule false); %s=true is accepted only when it can.", n.WindowStart.UTC().Format(time.RFC3339), protocol.LabelPerformMaintenance)
	case c.Opportunistic && !c.PodsKnown:
		return TriggerAnswer{Wait: true}
	case c.Opportunistic && !c.Idle:
		return refuse(protocol.ManualNotIdle, "The node was picked for opportunistic maintenance while idle, and is no longer idle (%s): it is not drained.", c.Busy)
	case c.Opportunistic && (c.TriggeredAt.IsZero() || c.Now.Sub(c.TriggeredAt) > c.MaxAge):
		return refuse(protocol.ManualStaleTrigger, "The opportunistic trigger was written at %s, more than %s ago (or its time cannot be read): the node may have changed since; it is not drained.",
			formatTime(c.TriggeredAt), c.MaxAge)
	case c.Opportunistic && c.TriggerFor != strconv.FormatInt(n.WindowStart.Unix(), 10):
		return refuse(protocol.ManualNoticeChanged, "The opportunistic trigger was written for the maintenance scheduled at %q (Unix seconds), and the pending one is scheduled for %s: it is not drained.",
			c.TriggerFor, n.WindowStart.UTC().Format(time.RFC3339))
	case c.Blocked != "":
		return refuse(c.Blocked, "The maintenance policy gates manual maintenance, and now is %s; set %s=true again when it allows.", c.BlockedDetail, protocol.LabelPerformMaintenance)
	}
	return TriggerAnswer{}
}

// formatTime is t in RFC 3339, or "(unknown)" when zero.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "(unknown)"
	}
	return t.UTC().Format(time.RFC3339)
}
