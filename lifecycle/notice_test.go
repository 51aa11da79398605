package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestNodeConditions: the lifecycle conditions follow the agent's state,
// each True or False, never absent.
func TestNodeConditions(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	pending := parsedNotice(`{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"2026-12-01T19:00:00Z","window_end_time":"2026-12-01T23:00:00Z"}`)
	open := parsedNotice(`{"can_reschedule":false,"maintenance_status":"ONGOING","type":"SCHEDULED","window_start_time":"2026-12-01T19:00:00Z","window_end_time":"2026-12-01T23:00:00Z"}`)
	draining := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: at, Deadline: at.Add(30 * time.Second)}
	for _, tc := range []struct {
		name string
		st   protocol.AgentState
		want string // the statuses in NodeConditionTypes' order
	}{
		{"idle, nothing scheduled", protocol.AgentState{Phase: protocol.PhaseIdle}, "FFFF"},
		{"a notice pending", protocol.AgentState{Phase: protocol.PhaseIdle, Notice: pending}, "TFFF"},
		{"the window open, before the VM is told to stop", protocol.AgentState{Phase: protocol.PhaseIdle, Notice: open}, "TFFF"},
		{"draining", draining, "FTTF"},
		{"terminating", protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonHostMaintenance, Started: at, Deadline: at.Add(time.Hour)}, "FTFT"},
		{"a slice's voluntary drain incomplete", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Drain: protocol.DrainIncomplete, Started: at, Deadline: at.Add(time.Hour)}, "FTFF"},
		{"left to GKE's handler: no drain of ours", protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, LeftToGKE: true, Started: at, Deadline: at.Add(time.Hour)}, "FTFF"},
	} {
		got := ""
		conds := NodeConditions(tc.st)
		for i, c := range conds {
			if c.Type != protocol.NodeConditionTypes[i] || c.Reason == "" || c.Message == "" {
				t.Errorf("%s: condition %d is %+v", tc.name, i, c)
			}
			got += string(c.Status[0])
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if c := NodeConditions(protocol.AgentState{Phase: protocol.PhaseIdle, Notice: pending})[0]; c.Message != "Compute Engine scheduled a SCHEDULED maintenance for the window starting 2026-12-01T19:00:00Z and ending 2026-12-01T23:00:00Z (can reschedule: true)" {
		t.Errorf("MaintenancePlanned says %q", c.Message)
	}
	// The window's opening does not make the maintenance unplanned: a GPU
	// VM is in it until TERMINATE_ON_HOST_MAINTENANCE, and may stop then.
	if c := NodeConditions(protocol.AgentState{Phase: protocol.PhaseIdle, Notice: open})[0]; c.Reason != "MaintenanceWindowOpen" ||
		c.Message != "Compute Engine's SCHEDULED maintenance window starting 2026-12-01T19:00:00Z and ending 2026-12-01T23:00:00Z is open: the VM may be stopped for it at any moment" {
		t.Errorf("MaintenancePlanned while the window is open: %s, %q", c.Reason, c.Message)
	}
}

// TestNodeConditionsChanged: only what differs is written, and a status
// that does not change keeps its transition time.
func TestNodeConditionsChanged(t *testing.T) {
	before := time.Date(2026, 11, 25, 11, 0, 0, 0, time.UTC)
	now := before.Add(time.Hour)
	want := NodeConditions(protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: before, Deadline: now})
	n := &corev1.Node{}
	if got := NodeConditionsChanged(n, want, now); len(got) != 4 || !got[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("none on the Node: %+v, want all four, since now", got)
	}
	for _, c := range want {
		c.LastTransitionTime = metav1.NewTime(before)
		n.Status.Conditions = append(n.Status.Conditions, c)
	}
	if got := NodeConditionsChanged(n, want, now); len(got) != 0 {
		t.Errorf("all as they are: %+v, want none", got)
	}
	n.Status.Conditions[1].Message = "stale deadline"
	n.Status.Conditions[3].Status = corev1.ConditionTrue
	got := NodeConditionsChanged(n, want, now)
	if len(got) != 2 || got[0].Type != protocol.ConditionMaintenanceInProgress || !got[0].LastTransitionTime.Time.Equal(before) ||
		got[1].Type != protocol.ConditionDrained || !got[1].LastTransitionTime.Time.Equal(now) {
		t.Errorf("a message and a status changed: %+v", got)
	}
}
