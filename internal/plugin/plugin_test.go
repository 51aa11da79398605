package plugin

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/policy"
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

func TestDrainPlan(t *testing.T) {
	grace := func(s int64) *int64 { return &s }
	pod := func(ns, name string, g int64, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{TerminationGracePeriodSeconds: grace(g)}}
	}
	ds := pod("kube-system", "dcgm", 2, nil)
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: new(bool)}}
	*ds.OwnerReferences[0].Controller = true
	done := pod("ml", "finished", 1, nil)
	done.Status.Phase = corev1.PodSucceeded
	pdbs := []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "trainer"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}}
	plan := DrainPlan([]*corev1.Pod{ds, pod("kube-system", "dns", 30, nil), pod("ml", "server", 5, nil), pod("ml", "trainer", 60, map[string]string{"app": "trainer"}), done}, pdbs, now)
	var got []string
	for _, p := range plan {
		got = append(got, string(p.Group)+" "+p.Pod+" "+p.Grace.String()+" "+strings.Join(p.RefusedBy, ","))
	}
	want := []string{"workload ml/trainer 1m0s ml/trainer", "workload ml/server 5s ", "system kube-system/dns 30s ", "daemonset kube-system/dcgm 2s "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("plan %q, want %q", got, want)
	}
}

func TestPreflight(t *testing.T) {
	node := func(name string, ann map[string]string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.LabelNodePool: "p"}, Annotations: ann},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		return n
	}
	notice := func(reschedule string) string {
		return `{"can_reschedule":` + reschedule + `,"maintenance_status":"PENDING","window_start_time":"2026-11-30T00:00:00Z"}`
	}
	gated, err := policy.ParseConfig(`
pools:
  p:
    gateManualTriggers: true
    exclusions: [{name: freeze, startTime: "2026-11-23T00:00:00Z", endTime: "2026-11-24T00:00:00Z"}]
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		cfg  policy.Config
		want string // "" for accepted
	}{
		{"pending and reschedulable", node("a", map[string]string{protocol.AnnotationUpcomingMaintenance: notice("true")}), policy.Config{}, ""},
		{"no notice", node("b", nil), policy.Config{}, "(no_notice)"},
		{"not reschedulable", node("c", map[string]string{protocol.AnnotationUpcomingMaintenance: notice("false")}), policy.Config{}, "cannot be rescheduled"},
		{"in maintenance", node("d", map[string]string{protocol.AnnotationUpcomingMaintenance: notice("true"), protocol.AnnotationPhase: "Draining", protocol.AnnotationReason: "preemption"}), policy.Config{}, "(already_ongoing)"},
		{"gated, in an exclusion", node("e", map[string]string{protocol.AnnotationUpcomingMaintenance: notice("true")}), gated, `inside the maintenance exclusion "freeze"`},
	} {
		in := Input{Now: now, Nodes: []*corev1.Node{tc.n}, Config: tc.cfg, PoolLabel: protocol.LabelNodePool}
		problems, notes := Preflight(in, tc.n)
		joined := strings.Join(problems, "; ")
		switch {
		case tc.want == "" && len(problems) > 0, tc.want != "" && !strings.Contains(joined, tc.want):
			t.Errorf("%s: problems %q, want %q", tc.name, problems, tc.want)
		}
		if len(notes) == 0 || !strings.Contains(strings.Join(notes, "; "), "pool p:") {
			t.Errorf("%s: notes %q, want the pool's cap", tc.name, notes)
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

// TestPreflightNamesTheSlice: a trigger on one host of a multi-host slice
// says that the whole slice goes down, names every host, and counts what
// the pool keeps without any of them.
func TestPreflightNamesTheSlice(t *testing.T) {
	var nodes []*corev1.Node
	for _, name := range []string{"v5p-0", "v5p-1", "v5p-2", "v5p-3", "other"} {
		pool := "v5p"
		if name == "other" {
			pool = "gpu"
		}
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protocol.LabelNodePool: pool, "slice": pool}, Annotations: map[string]string{
			protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":true,"maintenance_status":"PENDING","window_start_time":"2026-11-30T00:00:00Z"}`}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	nodes[4].Labels["slice"] = ""
	in := Input{Now: now, Nodes: nodes, PoolLabel: protocol.LabelNodePool, SliceLabel: "slice"}
	problems, notes := Preflight(in, nodes[1])
	joined := strings.Join(notes, "; ")
	for _, want := range []string{"the multi-host slice v5p: the trigger takes the whole slice down, its 4 hosts v5p-0, v5p-1, v5p-2, v5p-3",
		"v5p-1 asks Compute Engine once", "counts, as the slice's 4 hosts", "the pool keeps 0 nodes"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q, want %q", joined, want)
		}
	}
	if len(problems) != 0 {
		t.Errorf("problems %q", problems)
	}
	st := BuildStatus(in)
	var out strings.Builder
	if err := st.WriteTable(&out, now, time.UTC, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\nv5p-1 ") || !strings.Contains(out.String(), "v5p     v5p    4: v5p-0,v5p-1,v5p-2,v5p-3") || !strings.Contains(out.String(), "\nother ") {
		t.Errorf("status shows the slice's hosts one by one, or not as one line:\n%s", out.String())
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
