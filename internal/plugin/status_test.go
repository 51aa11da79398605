package plugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func TestIn(t *testing.T) {
	for d, want := range map[time.Duration]string{
		76 * time.Hour: "in 3d4h", 90 * time.Minute: "in 1h30m", 65 * time.Second: "in 1m5s", 5 * time.Second: "in 5s", -2 * time.Minute: "2m0s ago",
	} {
		if got := In(now.Add(d), now); got != want {
			t.Errorf("In(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestStatusShowsTheOpenWindow: a node whose notice is ONGOING shows its
// window as open, until its end, not as no maintenance.
func TestStatusShowsTheOpenWindow(t *testing.T) {
	node := func(name, status string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.LabelNodePool: "p"}, Annotations: map[string]string{
			protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":false,"maintenance_status":"` + status + `","window_start_time":"2026-11-23T11:00:00Z","window_end_time":"2026-11-23T15:00:00Z"}`,
		}}}
	}
	st := BuildStatus(Input{Now: now, Nodes: []*corev1.Node{node("open", "ONGOING"), node("pending", "PENDING")}, PoolLabel: protocol.LabelNodePool})
	var out strings.Builder
	if err := st.WriteTable(&out, now, time.UTC, false); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{"open": "open until 2026-11-23 15:00 (in 3h0m)", "pending": "2026-11-23 11:00 (1h0m ago)"} {
		var line string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, node+" ") {
				line = l
			}
		}
		if !strings.Contains(line, want) || (node == "pending" && strings.Contains(line, "open")) {
			t.Errorf("status of %s: %q, want its window %q", node, line, want)
		}
	}
}

// TestStatusAndWhyReadTheNodeConditions: the node lifecycle conditions the
// agent keeps are in status's JSON and wide table, and why names the True
// ones.
func TestStatusAndWhyReadTheNodeConditions(t *testing.T) {
	st := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: now.Add(-10 * time.Second), Deadline: now.Add(20 * time.Second)}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{protocol.LabelNodePool: "p"}}}
	protocol.WriteAgentState(n, st)
	for _, c := range lifecycle.NodeConditions(st) {
		c.LastTransitionTime = metav1.NewTime(now.Add(-10 * time.Second))
		n.Status.Conditions = append(n.Status.Conditions, c)
	}
	in := Input{Now: now, Nodes: []*corev1.Node{n}, PoolLabel: protocol.LabelNodePool}
	status := BuildStatus(in)
	if c := status.Nodes[0].Conditions; c["DrainInProgress"] != "True" || c["Drained"] != "False" || len(c) != 4 {
		t.Errorf("status conditions %v", c)
	}
	var out strings.Builder
	if err := status.WriteTable(&out, now, time.UTC, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "MaintenanceInProgress,DrainInProgress") {
		t.Errorf("wide status:\n%s", out.String())
	}
	if why := Why(in, n); !strings.Contains(why, "Its node conditions: MaintenanceInProgress (Preemption, since 2026-11-23T11:59:50Z (10s ago)), DrainInProgress (Preemption") {
		t.Errorf("why: %s", why)
	}
}

// TestAgentsWordIsItsNodes: an agent's Event about a node is said as the
// node's word only when that node reported it.
func TestAgentsWordIsItsNodes(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}}
	said := func(host string) string {
		e := corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "gpu-0"}, Reason: protocol.EventManualRejected,
			Message: "refused", Source: corev1.EventSource{Component: protocol.EventSourceAgent, Host: host}, LastTimestamp: metav1.NewTime(now)}
		return Why(Input{Now: now, Nodes: []*corev1.Node{n}, Events: []corev1.Event{e}}, n)
	}
	if !strings.Contains(said("gpu-0"), "The agent's last word") {
		t.Error("its own agent's refusal is not said")
	}
	if why := said("gpu-1"); strings.Contains(why, "The agent's last word") {
		t.Errorf("another node's agent speaks for gpu-0: %s", why)
	}
}
