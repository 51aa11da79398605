package drain_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

// apiClient is the agent's API client (what the drain uses in the agent).
func apiClient(t testing.TB) *kube.Client {
	t.Helper()
	c, err := kube.New(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type recorder struct {
	mu       sync.Mutex
	outcomes map[string]int
	events   []string // "reason" in order
	messages []string // their messages
}

func (r *recorder) Escalation() {}

func (r *recorder) Eviction(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes == nil {
		r.outcomes = map[string]int{}
	}
	r.outcomes[outcome]++
}

func (r *recorder) NodeEvent(_ bool, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason)
	r.messages = append(r.messages, message)
}

func (r *recorder) count(outcome string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[outcome]
}

func addNode(t *testing.T, name string) {
	t.Helper()
	world.NodeT(t, testworld.NodeSpec{Name: name})
}

// podSpec is a pod on node that takes delay to stop after SIGTERM.
func podSpec(ns, name, node string, grace int64, delay time.Duration, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: delay.String()}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                    []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}},
		},
	}
}

func create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := world.Client.CoreV1().Pods(p.Namespace).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = world.Client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// step is one observed change of a pod on the node.
type step struct {
	pod   string // namespace/name
	kind  string // "terminating" or "deleted"
	at    time.Time
	grace int64 // deletionGracePeriodSeconds when terminating
	delTS time.Time
	// disruption is the pod's DisruptionTarget condition when it was
	// seen terminating (nil: none).
	disruption *corev1.PodCondition
}

// hostMaintenance is what the tests' drains tell a pod they delete.
var hostMaintenance = drain.Disruption{Reason: protocol.DisruptionHostMaintenance, Message: "the test's host maintenance"}

// observe watches the node's pods and records when each starts terminating
// and when it is deleted, in the API server's order.
func observe(t testing.TB, node string) func() []step {
	t.Helper()
	w, err := world.Client.CoreV1().Pods("").Watch(testworld.Ctx(t, 5*time.Minute), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var steps []step
	seen := map[types.UID]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			ref := p.Namespace + "/" + p.Name
			mu.Lock()
			switch {
			case ev.Type == watch.Deleted:
				steps = append(steps, step{pod: ref, kind: "deleted", at: time.Now()})
			case p.DeletionTimestamp != nil && !seen[p.UID]:
				seen[p.UID] = true
				var g int64
				if p.DeletionGracePeriodSeconds != nil {
					g = *p.DeletionGracePeriodSeconds
				}
				var disruption *corev1.PodCondition
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.DisruptionTarget {
						disruption = &c
					}
				}
				steps = append(steps, step{pod: ref, kind: "terminating", at: time.Now(), grace: g, delTS: p.DeletionTimestamp.Time, disruption: disruption})
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []step {
		mu.Lock()
		defer mu.Unlock()
		return append([]step(nil), steps...)
	}
}

func startPods(t testing.TB, node string) *drain.NodePods {
	t.Helper()
	pods := drain.NewNodePods(apiClient(t).PodListWatch(node), nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := pods.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestDrainOrderAndWhatIsLeftAlone(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	const node = "drain-order-0"
	addNode(t, node)
	ns := world.Namespace(t)
	create(t, podSpec(ns, "trainer-0", node, 3, 3*time.Second, nil))
	create(t, podSpec(ns, "trainer-1", node, 2, 2*time.Second, nil))
	create(t, podSpec(metav1.NamespaceSystem, "dns-"+node, node, 1, time.Second, nil))
	create(t, podSpec(ns, "agent", node, 1, time.Second, nil))
	mirror := podSpec(ns, "static-"+node, node, 1, time.Second, nil)
	mirror.Annotations[corev1.MirrorPodAnnotationKey] = "static"
	create(t, mirror)
	// A DaemonSet that runs one pod on this node.
	dsLabels := map[string]string{"app": "node-exporter"}
	tmpl := podSpec(ns, "", "", 1, time.Second, dsLabels)
	tmpl.Spec.NodeName = ""
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "node-exporter"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := world.Client.AppsV1().DaemonSets(ns).Create(testworld.Ctx(t, 10*time.Second), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	world.WaitRunning(t, node, 6)

	steps := observe(t, node)
	rec := &recorder{}
	d := drain.New(drain.Options{Client: apiClient(t), Pods: startPods(t, node), Skip: types.NamespacedName{Namespace: ns, Name: "agent"},
		RetryInterval: 500 * time.Millisecond, Recorder: rec, Events: rec})
	res, err := d.Drain(testworld.Ctx(t, 2*time.Minute), time.Now().Add(time.Minute), hostMaintenance)
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 4 || res.Deleted != 0 {
		t.Errorf("result %+v, want 4 evicted (2 workload, 1 system, 1 DaemonSet) and none deleted", res)
	}
	group := func(ref string) string {
		switch ref {
		case ns + "/trainer-0", ns + "/trainer-1":
			return "workload"
		case metav1.NamespaceSystem + "/dns-" + node:
			return "system"
		}
		return "daemonset"
	}
	// In the API server's order: every workload pod gone before any system
	// pod starts terminating, every system pod gone before the DaemonSet pod.
	var order []string
	lastGone := map[string]int{}
	firstTerminating := map[string]int{}
	for i, s := range steps() {
		g := group(s.pod)
		order = append(order, fmt.Sprintf("%s %s", s.kind, s.pod))
		if s.kind == "deleted" {
			lastGone[g] = i
		} else if _, ok := firstTerminating[g]; !ok {
			firstTerminating[g] = i
		}
		if s.pod == ns+"/agent" || s.pod == ns+"/static-"+node {
			t.Errorf("%s was touched: %s", s.pod, s.kind)
		}
	}
	if !(lastGone["workload"] < firstTerminating["system"] && lastGone["system"] < firstTerminating["daemonset"]) {
		t.Errorf("drain order broken:\n%v", order)
	}
	for _, name := range []string{"agent", "static-" + node} {
		if _, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v, want it left running", name, err)
		}
	}
}

func TestDrainGivesEachPodItsGrace(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	const node = "drain-grace-0"
	addNode(t, node)
	ns := world.Namespace(t)
	create(t, podSpec(ns, "checkpointing", node, 20, 15*time.Second, nil))
	create(t, podSpec(ns, "long-grace", node, 600, 600*time.Second, nil))
	world.WaitRunning(t, node, 2)
	steps := observe(t, node)
	rec := &recorder{}
	d := drain.New(drain.Options{Client: apiClient(t), Pods: startPods(t, node), Recorder: rec, Events: rec})
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	if _, err := d.Drain(testworld.Ctx(t, 2*time.Minute), deadline, hostMaintenance); err != nil {
		t.Fatal(err)
	}
	got := map[string]step{}
	for _, s := range steps() {
		got[s.kind+" "+s.pod] = s
	}
	// 20 s grace, stops after 15 s: evicted with its whole grace, gone after
	// its 15 s (to the second) and not escalated.
	if s := got["terminating "+ns+"/checkpointing"]; s.grace != 20 {
		t.Errorf("checkpointing evicted with grace %d, want 20", s.grace)
	}
	if gone := got["deleted "+ns+"/checkpointing"].at.Sub(start); gone < 14*time.Second {
		t.Errorf("checkpointing gone %s after the drain began, before its 15 s", gone)
	}
	// 600 s grace: capped so that it ends by the 30 s deadline minus the
	// margin, rounded down to whole seconds (the API server records its
	// end to the second, rounded down too).
	margin := deadline.Add(-drain.DefaultMargin)
	if s := got["terminating "+ns+"/long-grace"]; s.grace < 25 || s.grace > 27 || s.delTS.After(margin) {
		t.Errorf("long-grace evicted with grace %d ending %s, want about 27 s ending by the deadline minus the margin %s", s.grace, s.delTS, margin)
	}
	if rec.count(drain.OutcomeEvicted) != 2 || rec.count(drain.OutcomeEscalated) != 0 {
		t.Errorf("outcomes %v, want 2 evicted, none deleted", rec.outcomes)
	}
}

// drainPDBBlocked drains node, whose one pod (with the given grace) a
// PodDisruptionBudget protects, with the deadline `within` from now; it
// returns when the drain began, how the pod was terminated, and what was
// recorded.
func drainPDBBlocked(t *testing.T, node string, grace, within time.Duration) (time.Time, step, *recorder) {
	t.Helper()
	addNode(t, node)
	ns := world.Namespace(t)
	labels := map[string]string{"app": "singleton"}
	create(t, podSpec(ns, "singleton", node, int64(grace.Seconds()), grace, labels))
	world.Budget(t, ns, "singleton", labels, intstr.FromInt32(1), "1 healthy pod", func(b *policyv1.PodDisruptionBudget) bool { return b.Status.CurrentHealthy == 1 })
	steps := observe(t, node)
	rec := &recorder{}
	d := drain.New(drain.Options{Client: apiClient(t), Pods: startPods(t, node), RetryInterval: 500 * time.Millisecond, Recorder: rec, Events: rec})
	start := time.Now()
	res, err := d.Drain(testworld.Ctx(t, time.Minute), start.Add(within), hostMaintenance)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 1 || res.Evicted != 0 {
		t.Errorf("result %+v, want the pod deleted, not evicted", res)
	}
	var term step
	for _, s := range steps() {
		if s.kind == "terminating" {
			term = s
		}
	}
	if want := []string{protocol.EventBlocked, protocol.EventEscalated}; fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", rec.events, want)
	}
	// Told, as Kubernetes' own deleters tell a pod, before the delete.
	if c := term.disruption; c == nil || c.Status != corev1.ConditionTrue || c.Reason != hostMaintenance.Reason || c.Message != hostMaintenance.Message {
		t.Errorf("the deleted pod's DisruptionTarget condition: %+v, want True, %s", c, hostMaintenance.Reason)
	}
	return start, term, rec
}

func TestDrainDeletesPDBBlockedPodAtDeadlineMinusGrace(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	start, term, rec := drainPDBBlocked(t, "drain-pdb-0", 4*time.Second, 10*time.Second)
	// Deleted at deadline - margin - grace - the escalation's lead (2 s
	// in), not before; with its whole 4 s grace, which then ends more than
	// the margin before the VM stops. deletionTimestamp - grace is when the
	// delete happened (to the second).
	deletedAt := term.delTS.Add(-time.Duration(term.grace) * time.Second)
	due := 10*time.Second - drain.DefaultMargin - 4*time.Second - drain.EscalationLead
	if term.grace != 4 || deletedAt.Before(start.Add(due-time.Second)) {
		t.Errorf("deleted %s after the drain began with grace %d; want at %s (deadline - margin - grace - lead) with grace 4", deletedAt.Sub(start), term.grace, due)
	}
	if rec.count(drain.OutcomeBlocked) < 2 || rec.count(drain.OutcomeEscalated) != 1 {
		t.Errorf("outcomes %v, want repeated 429s then one delete", rec.outcomes)
	}
	if len(rec.messages) > 0 && !strings.Contains(rec.messages[0], "deleting it at ") {
		t.Errorf("the blocked Event says %q, want when the pod will be deleted", rec.messages[0])
	}
}

// TestDrainDeletesPDBBlockedPodNowWhenItsGraceNoLongerFits: a 20 s grace
// and 5 s left (a preemption): the refused pod is deleted at once with
// what is left before the margin, and the Event says so.
func TestDrainDeletesPDBBlockedPodNowWhenItsGraceNoLongerFits(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	start, term, rec := drainPDBBlocked(t, "drain-pdb-1", 20*time.Second, 5*time.Second)
	deletedAt := term.delTS.Add(-time.Duration(term.grace) * time.Second)
	left := int64((5*time.Second - drain.DefaultMargin) / time.Second)
	if term.grace < left-1 || term.grace > left || deletedAt.After(start.Add(3*time.Second)) {
		t.Errorf("deleted %s after the drain began with grace %d; want at once with the %d s left before the margin", deletedAt.Sub(start), term.grace, left)
	}
	if len(rec.messages) == 0 || !strings.Contains(rec.messages[0], "grace period no longer fits before the VM stops; deleting it now") {
		t.Errorf("the blocked Event says %q, want that the pod is deleted now", rec.messages)
	}
}

// TestDrainKeepsTimeForSystemPods: a preemption's 30 s, a workload pod
// whose grace (60 s) would take all of it, and a kube-system pod. The
// workload gets the deadline minus the reserve, and the system pod still
// gets its SIGTERM with time to stop before the VM does.
func TestDrainKeepsTimeForSystemPods(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	const node = "drain-reserve-0"
	addNode(t, node)
	ns := world.Namespace(t)
	create(t, podSpec(ns, "trainer", node, 60, 60*time.Second, nil))
	create(t, podSpec(metav1.NamespaceSystem, "dns-"+node, node, 30, 30*time.Second, nil))
	world.WaitRunning(t, node, 2)
	steps := observe(t, node)
	d := drain.New(drain.Options{Client: apiClient(t), Pods: startPods(t, node)})
	deadline := time.Now().Add(30 * time.Second)
	res, err := d.Drain(testworld.Ctx(t, 2*time.Minute), deadline, hostMaintenance)
	if err != nil {
		t.Fatal(err)
	}
	terminating := map[string]step{}
	for _, s := range steps() {
		if s.kind == "terminating" {
			terminating[s.pod] = s
		}
	}
	trainer, dns := terminating[ns+"/trainer"], terminating[metav1.NamespaceSystem+"/dns-"+node]
	// The workload ends by deadline - 15 s (to the second, and the moment
	// between planning the eviction and the API server taking it).
	if trainer.grace == 0 || trainer.delTS.After(deadline.Add(-drain.DefaultReserve+2*time.Second)) {
		t.Errorf("trainer: grace %d ending %s; want it to end by %s (deadline - reserve)", trainer.grace, trainer.delTS, deadline.Add(-drain.DefaultReserve))
	}
	// The system pod gets at least most of the reserve and ends by the deadline.
	if dns.grace < 10 || dns.delTS.After(deadline.Add(2*time.Second)) {
		t.Errorf("system pod: grace %d ending %s; want 10 s or more, ending by the deadline %s", dns.grace, dns.delTS, deadline)
	}
	if res.Evicted != 2 {
		t.Errorf("result %+v, want both evicted", res)
	}
}

// TestDrainEndsAtItsDeadline: a pod stuck terminating (a finalizer) and a
// pod that tolerates the taint and arrives after the drain began. The
// drain does not wait for the newcomer, stops waiting for the stuck pod
// at the deadline, and says so.
func TestDrainEndsAtItsDeadline(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	const node = "drain-end-0"
	addNode(t, node)
	ns := world.Namespace(t)
	stuck := podSpec(ns, "stuck", node, 1, time.Second, nil)
	stuck.Finalizers = []string{"example.com/never"}
	create(t, stuck)
	t.Cleanup(func() {
		p, err := world.Client.CoreV1().Pods(ns).Get(context.Background(), "stuck", metav1.GetOptions{})
		if err == nil {
			p.Finalizers = nil
			_, _ = world.Client.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		}
	})
	world.WaitRunning(t, node, 1)
	rec := &recorder{}
	pods := startPods(t, node)
	d := drain.New(drain.Options{Client: apiClient(t), Pods: pods, Recorder: rec, Events: rec, TaintKey: protocol.TaintImpendingTermination})
	ctx := testworld.Ctx(t, 2*time.Minute)
	deadline := time.Now().Add(8 * time.Second)
	type result struct {
		res drain.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := d.Drain(ctx, deadline, hostMaintenance)
		done <- result{res, err}
	}()
	// Once the stuck pod is terminating, a pod that tolerates everything
	// lands on the node.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "stuck", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatal("the stuck pod was never evicted")
	}
	create(t, podSpec(ns, "tolerates-all", node, 1, time.Second, nil))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if fmt.Sprint(r.res.Left) != fmt.Sprint([]string{ns + "/stuck"}) {
		t.Errorf("left %v, want only the stuck pod", r.res.Left)
	}
	if !slices.Contains(rec.events, protocol.EventGroupDeadline) {
		t.Errorf("events %v, want %s", rec.events, protocol.EventGroupDeadline)
	}
	if p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "tolerates-all", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the newcomer that tolerates the taint: %v, deleting %v; want it left alone", err, p.DeletionTimestamp)
	}
}
