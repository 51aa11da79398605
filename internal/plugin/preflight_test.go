package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestPreviewIsTheDrainsPlan: `kubectl gce-maintenance trigger`'s preview and
// the drain share one plan. The same pods (the agent's own, a checkpoint
// lead, ties of grace, system, DaemonSet, mirror and finished pods) go to
// DrainPlan and to a real drain.Drainer whose evictions are all accepted
// at once: the drain asks the pods the preview lists, with the graces it
// shows, batch after batch in its order (the calls of one batch run
// concurrently, so a batch is compared as a set), and nothing else.
func TestPreviewIsTheDrainsPlan(t *testing.T) {
	start := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	mk := func(ns, name string, grace int64, owner string, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Annotations: ann},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if owner != "" {
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "x", Controller: &yes}}
		}
		return p
	}
	agentPod := mk("maintenance-handler", "agent-x1", 30, "DaemonSet", nil)
	agentPod.Labels = agentPodLabels
	finished := mk("ml", "done", 30, "", nil)
	finished.Status.Phase = corev1.PodSucceeded
	pods := []*corev1.Pod{
		agentPod, finished,
		mk("ml", "trainer", 60, "", map[string]string{protocol.PodAnnotationCheckpointLead: "5m"}),
		mk("ml", "server", 5, "", nil),
		mk("ml", "batch", 30, "", nil),
		mk("ml", "a", 30, "", nil),
		mk("kube-system", "dns", 30, "", nil),
		mk("kube-system", "proxy", 5, "", nil),
		mk("kube-system", "static", 30, "", map[string]string{corev1.MirrorPodAnnotationKey: "x"}),
		mk("kube-system", "dcgm", 2, "DaemonSet", nil),
	}

	preview := DrainPlan(pods, nil, start)
	// The preview's batches: consecutive pods asked at the same moment.
	var batches [][]string
	var leads []time.Duration
	for i, p := range preview {
		if i == 0 || p.Group != preview[i-1].Group || p.Lead != preview[i-1].Lead {
			batches = append(batches, nil)
			leads = append(leads, p.Lead)
		}
		batches[len(batches)-1] = append(batches[len(batches)-1], fmt.Sprintf("%s %s", p.Pod, p.Grace))
	}
	want := [][]string{
		{"ml/a 30s", "ml/batch 30s", "ml/server 5s"},
		{"ml/trainer 1m0s"},
		{"kube-system/dns 30s", "kube-system/proxy 5s"},
		{"kube-system/dcgm 2s"},
	}
	if diff := cmp.Diff(want, batches); diff != "" {
		t.Fatalf("preview batches (-want +got):\n%s", diff)
	}

	// The real drain, as the agent runs it: its own pod skipped.
	clk := testingclock.NewFakeClock(start)
	src := newVanishingPods(pods)
	d := drain.New(drain.Options{Client: src, Pods: src, Clock: clk, Skip: types.NamespacedName{Namespace: agentPod.Namespace, Name: agentPod.Name}})
	done := make(chan error, 1)
	go func() {
		_, err := d.Drain(context.Background(), start.Add(lifecycle.DefaultManualDrainTimeout), drain.Disruption{})
		done <- err
	}()
	var got [][]string
	for i, b := range want {
		if lead := leads[i]; lead > 0 {
			// The calls before it are in: the drain waits for this
			// batch's lead on the clock (a wait for a time that has come
			// by then does not wait: drain's wait).
			clk.SetTime(start.Add(lead))
		}
		var batch []string
		for range b {
			batch = append(batch, <-src.calls)
		}
		sort.Strings(batch)
		got = append(got, batch)
	}
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
	close(src.calls)
	for extra := range src.calls {
		t.Errorf("the drain also asked %s, which the preview does not list", extra)
	}
	if diff := cmp.Diff(batches, got); diff != "" {
		t.Errorf("the drain's calls differ from the preview (-preview +drain):\n%s", diff)
	}
}

// vanishingPods is a node's pods for a drain (drain.PodSource) and the
// API it calls (drain.API): every eviction is accepted, recorded as
// "namespace/name grace", and the pod is gone at once.
type vanishingPods struct {
	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	changed chan struct{}
	calls   chan string
}

func newVanishingPods(pods []*corev1.Pod) *vanishingPods {
	v := &vanishingPods{pods: map[types.UID]*corev1.Pod{}, changed: make(chan struct{}, 1), calls: make(chan string, 64)}
	for _, p := range pods {
		v.pods[p.UID] = p
	}
	return v
}

func (v *vanishingPods) List() []*corev1.Pod {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(v.pods))
	for _, p := range v.pods {
		out = append(out, p)
	}
	return out
}

func (v *vanishingPods) Changed() <-chan struct{} { return v.changed }

func (v *vanishingPods) Evict(_ context.Context, e *policyv1.Eviction) error {
	v.mu.Lock()
	for uid, p := range v.pods {
		if p.Namespace == e.Namespace && p.Name == e.Name {
			delete(v.pods, uid)
		}
	}
	v.mu.Unlock()
	v.calls <- fmt.Sprintf("%s/%s %s", e.Namespace, e.Name, time.Duration(*e.DeleteOptions.GracePeriodSeconds)*time.Second)
	select {
	case v.changed <- struct{}{}:
	default:
	}
	return nil
}

func (v *vanishingPods) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
}

func (v *vanishingPods) DeletePod(_ context.Context, ns, name string, _ metav1.DeleteOptions) error {
	v.calls <- "deleted " + strings.Join([]string{ns, name}, "/")
	return nil
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
