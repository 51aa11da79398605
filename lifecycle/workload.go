package lifecycle

// The workload notice: every pod on the node is told of the node's
// maintenance before SIGTERM, where it can read it without API access (an
// annotation the downward API exposes as a file) and where a controller
// can (a pod condition). Pending while a notice is pending; starting once
// the maintenance begins, for a pod with a checkpoint lead, with when it
// will be asked to stop; gone when the notice is. WorkloadTargetOf says
// what the node's state tells its pods; the agent writes it.

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// WorkloadTarget is the node's side of the notice, set by the loop after
// each decision.
type WorkloadTarget struct {
	Phase                  string // "" for none
	WindowStart, WindowEnd time.Time
	// DrainStart and Deadline, while starting: a pod is asked to stop when
	// the drain's plan says (drain.Plan).
	DrainStart, Deadline time.Time
}

// WorkloadTargetOf is the notice a node in state st gives its pods; drainStart is
// when the running drain began.
func WorkloadTargetOf(st State, drainStart time.Time) WorkloadTarget {
	n, end := st.Notice, st.KnownEnd
	switch {
	case st.Active() && st.Reason == protocol.ReasonKnownEnd:
		return WorkloadTarget{Phase: protocol.NoticeStarting, WindowStart: end, DrainStart: drainStart, Deadline: st.Deadline}
	case st.Active():
		return WorkloadTarget{Phase: protocol.NoticeStarting, WindowStart: n.WindowStart, DrainStart: drainStart, Deadline: st.Deadline}
	case !end.IsZero() && (st.ScheduledTime == "" && !windowOpen(st) || end.Before(n.WindowStart)):
		// The VM's known end, as a window that opens when it ends (and
		// the earlier of the two where a maintenance is pending too).
		return WorkloadTarget{Phase: protocol.NoticePending, WindowStart: end}
	case st.ScheduledTime != "":
		return WorkloadTarget{Phase: protocol.NoticePending, WindowStart: n.WindowStart}
	case windowOpen(st):
		// The window is open and the VM may stop within it, though the
		// drain waits for the stop's own signal: not "no maintenance".
		return WorkloadTarget{Phase: protocol.NoticeOngoing, WindowStart: n.WindowStart, WindowEnd: n.WindowEnd}
	}
	return WorkloadTarget{}
}

// windowOpen: the notice's window is open and the maintenance that
// stopped the VM was not that one.
func windowOpen(st State) bool {
	return st.Notice.Status == maintenance.StatusOngoing && NoticeID(st.Notice) != st.NoticeDone
}

// NoticeFor is what pod p is told ("" for nothing); evictAt is when the
// drain's plan asks it to stop. Once the maintenance starts, only a pod
// with a checkpoint lead is told so (it needs to hear before its
// eviction); the others hear SIGTERM at that moment, and their notice is
// left as it was, so that the drain's API calls are not shared with a
// write per pod.
func (t WorkloadTarget) NoticeFor(p *corev1.Pod, evictAt time.Time) string {
	if t.Phase == "" {
		return ""
	}
	if _, lead, err := protocol.CheckpointLead(p.Annotations); t.Phase == protocol.NoticeStarting && (!lead || err != nil) {
		return p.Annotations[protocol.PodAnnotationNotice]
	}
	n := protocol.WorkloadNotice{Phase: t.Phase, WindowStart: t.WindowStart, WindowEnd: t.WindowEnd}
	if t.Phase == protocol.NoticeStarting && !t.DrainStart.IsZero() {
		n.EvictAt = evictAt
	}
	return n.Encode()
}
