package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// The side-by-side drain: one node of 110 pods, drained by the agent
// binary as it ships (a host maintenance) and by kubectl drain
// (--ignore-daemonsets --force, its defaults otherwise), three trials
// each, interleaved:
//   - 100 workload pods with graces of 0-10 s (bare pods);
//   - 3 pods of a Deployment under a PodDisruptionBudget minAvailable 2,
//     grace 5 s, whose replacements start on another node and are Ready
//     about 2 s after they are scheduled (kwok's delays);
//   - 5 kube-system pods with 5 s;
//   - 2 DaemonSet pods with 2 s, which stay.
const (
	sbsWorkload   = 100
	sbsHeld       = 3
	sbsSystem     = 5
	sbsDaemonSets = 2
	// A replacement runs 0.1 s after it is scheduled and is Ready 2 s
	// later.
	sbsCreateDelay = "100ms"
	sbsReadyDelay  = "2s"
)

// sbsRun is what one drain did, as the API server's watches saw it.
type sbsRun struct {
	tool     string
	allGone  time.Duration // every pod but the DaemonSets' deleted
	workGone time.Duration // the workload pods and the Deployment's deleted
	// held: when each of the Deployment's pods on the node was seen
	// terminating (its eviction accepted), in order; ready: when each
	// replacement was first Ready.
	held, ready []time.Duration
	// minHealthy is the fewest of the Deployment's pods Ready and not
	// terminating at any moment of the drain.
	minHealthy int
	// refusals counts kubectl's evictions refused by the budget.
	refusals int
	problems []string
}

// timedLines keeps what a process writes, each line with the time since
// start.
type timedLines struct {
	mu    sync.Mutex
	start time.Time
	buf   bytes.Buffer
	part  []byte
}

func (t *timedLines) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.part = append(t.part, p...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(&t.buf, "%6.2fs %s\n", time.Since(t.start).Seconds(), t.part[:i])
		t.part = t.part[i+1:]
	}
}

func (t *timedLines) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// BenchmarkDrainBesideKubectl prints both drains: when every pod but the
// DaemonSets' was gone, and the budget chain's steps beside the
// replacements' readiness. It checks what must hold of the agent's drain
// whatever the timing: the workload pods and the Deployment's before any
// kube-system pod, each pod stopped with its own grace, the budget kept.
func BenchmarkDrainBesideKubectl(b *testing.B) {
	testworld.Need(b)
	kubectl := testworld.Kubectl(b)
	var runs []sbsRun
	for b.Loop() {
		for trial := range 3 {
			for _, tool := range []string{"agent", "kubectl"} {
				r := drainSideBySide(b, tool, kubectl, fmt.Sprintf("sbs-%s-%d", tool, trial))
				fmt.Printf("side by side, %s trial %d: %s\n", tool, trial+1, r)
				for _, p := range r.problems {
					b.Errorf("%s trial %d: %s", tool, trial+1, p)
				}
				runs = append(runs, r)
			}
		}
	}
	for _, tool := range []string{"agent", "kubectl"} {
		var gone []time.Duration
		for _, r := range runs {
			if r.tool == tool {
				gone = append(gone, r.allGone)
			}
		}
		slices.Sort(gone)
		median := gone[len(gone)/2]
		b.ReportMetric(median.Seconds(), tool+"-all-gone-median-s")
		fmt.Printf("side by side: %s: every pod but the DaemonSets' gone after %s (median of %d; %s to %s)\n", tool,
			median.Round(10*time.Millisecond), len(gone), gone[0].Round(10*time.Millisecond), gone[len(gone)-1].Round(10*time.Millisecond))
	}
}

func (r sbsRun) String() string {
	var steps []string
	for i, h := range r.held {
		s := fmt.Sprintf("evicted %.2fs", h.Seconds())
		if i > 0 && i-1 < len(r.ready) {
			s += fmt.Sprintf(" (%+.2fs after replacement %d Ready at %.2fs)", (h - r.ready[i-1]).Seconds(), i, r.ready[i-1].Seconds())
		}
		steps = append(steps, s)
	}
	refused := ""
	if r.tool == "kubectl" {
		refused = fmt.Sprintf("; %d evictions refused by the budget", r.refusals)
	}
	return fmt.Sprintf("workload gone %.2fs, all but DaemonSets gone %.2fs; held pods: %s; fewest healthy %d%s",
		r.workGone.Seconds(), r.allGone.Seconds(), strings.Join(steps, ", "), r.minHealthy, refused)
}

// drainSideBySide builds the node, drains it with tool, and returns what
// the watches saw.
func drainSideBySide(b *testing.B, tool, kubectl, node string) sbsRun {
	ctx := context.Background()
	ns := world.Namespace(b)
	pool := map[string]string{"side-by-side": node}
	world.NodeT(b, testworld.NodeSpec{Name: node, Labels: pool})
	pods := nodePods{b: b, node: node}
	for i := range sbsWorkload {
		pods.create(pods.pod(ns, fmt.Sprintf("work-%d", i), int64(i%11), nil))
	}
	pods.system(sbsSystem)
	pods.daemonSets(ns, sbsDaemonSets)
	held := map[string]string{"app": "held"}
	tmpl := pods.pod(ns, "", 5, held)
	tmpl.Spec.NodeName, tmpl.Spec.NodeSelector = "", pool
	for stage, delay := range map[string]string{"pod-create": sbsCreateDelay, "pod-ready": sbsReadyDelay} {
		tmpl.Annotations[stage+".stage.kwok.x-k8s.io/delay"] = delay
		tmpl.Annotations[stage+".stage.kwok.x-k8s.io/jitter-delay"] = delay
	}
	replicas := int32(sbsHeld)
	if _, err := world.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: held},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	two := intstr.FromInt32(sbsHeld - 1)
	if _, err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: held}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	total := sbsWorkload + sbsHeld + sbsSystem + sbsDaemonSets
	pods.waitReady(total)
	poll(b, "the budget allowing one disruption", time.Minute, func() bool {
		pdb, err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "held", metav1.GetOptions{})
		return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 1
	})
	// The replacements' node.
	world.NodeT(b, testworld.NodeSpec{Name: node + "-spare", Labels: pool})

	if tool == "agent" {
		emu := gceemu.StartT(b, gceemu.Config{Name: node})
		proc := runAgent(b, node, emu)
		poll(b, "agent healthy", 30*time.Second, func() bool { code, _ := proc.get("/healthz"); return code == 200 })
		w := newSBSWatch(b, ns, node, total-sbsDaemonSets)
		w.start = time.Now()
		emu.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE")
		return w.wait(b, tool)
	}
	w := newSBSWatch(b, ns, node, total-sbsDaemonSets)
	cmd := exec.Command(kubectl, "--kubeconfig", world.Kubeconfig, "drain", node, "--ignore-daemonsets", "--force")
	out := &timedLines{}
	cmd.Stdout, cmd.Stderr = out, out
	w.start = time.Now()
	out.start = w.start
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := w.wait(b, tool)
	if err := cmd.Wait(); err != nil {
		b.Errorf("kubectl drain: %v\n%s", err, out)
	}
	r.refusals = strings.Count(out.String(), "Cannot evict pod as it would violate")
	if testing.Verbose() {
		fmt.Printf("kubectl drain said:\n%s", out)
	}
	return r
}

// sbsWatch follows the drained node's pods and the Deployment's.
type sbsWatch struct {
	start      time.Time
	node, held watch.Interface
	healthy    map[string]bool // the Deployment's pods Ready and not terminating
	want       int             // pods on the node to be deleted
}

func newSBSWatch(b *testing.B, ns, node string, want int) *sbsWatch {
	ctx := context.Background()
	nw, err := world.Client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		b.Fatal(err)
	}
	list, err := world.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=held"})
	if err != nil {
		b.Fatal(err)
	}
	healthy := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && testworld.PodReady(&p) {
			healthy[p.Name] = true
		}
	}
	hw, err := world.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=held", ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nw.Stop(); hw.Stop() })
	return &sbsWatch{node: nw, held: hw, healthy: healthy, want: want}
}

// wait follows both watches until every pod to go is gone, and checks the
// order, the graces and the budget as it goes.
func (w *sbsWatch) wait(b *testing.B, tool string) sbsRun {
	r := sbsRun{tool: tool, minHealthy: len(w.healthy)}
	var mu sync.Mutex
	since := func() time.Duration { return time.Since(w.start) }
	// The Deployment's pods: which are healthy, and when each replacement
	// was first Ready.
	healthy := w.healthy
	readySeen := map[string]bool{}
	done := make(chan struct{})
	heldDone := make(chan struct{})
	go func() {
		defer close(heldDone)
		for {
			select {
			case <-done:
				return
			case ev, ok := <-w.held.ResultChan():
				if !ok {
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				mu.Lock()
				if ev.Type != watch.Deleted && p.DeletionTimestamp == nil && testworld.PodReady(p) {
					if !healthy[p.Name] && !readySeen[p.Name] {
						readySeen[p.Name] = true // a replacement, Ready
						r.ready = append(r.ready, since())
					}
					healthy[p.Name] = true
				} else {
					delete(healthy, p.Name)
				}
				r.minHealthy = min(r.minHealthy, len(healthy))
				mu.Unlock()
			}
		}
	}()
	terminating := map[string]time.Duration{}
	gone := map[string]time.Duration{}
	for ev := range w.node.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || isDaemonSetPod(p) {
			continue
		}
		key := p.Namespace + "/" + p.Name
		now := since()
		if _, seen := terminating[key]; !seen && (p.DeletionTimestamp != nil || ev.Type == watch.Deleted) {
			terminating[key] = now
			if g := p.Spec.TerminationGracePeriodSeconds; g != nil && !ownGrace(*g, p.DeletionGracePeriodSeconds) {
				r.problems = append(r.problems, fmt.Sprintf("%s stopped with grace %s, its own is %d", key, graceText(p.DeletionGracePeriodSeconds), *g))
			}
			if p.Labels["app"] == "held" {
				mu.Lock()
				r.held = append(r.held, now)
				mu.Unlock()
			}
		}
		if ev.Type == watch.Deleted {
			gone[key] = now
			if p.Namespace != metav1.NamespaceSystem {
				r.workGone = max(r.workGone, now)
			}
			if len(gone) == w.want {
				r.allGone = now
				break
			}
		}
	}
	close(done)
	<-heldDone
	if tool == "agent" {
		for key, at := range terminating {
			if strings.HasPrefix(key, metav1.NamespaceSystem+"/") && at < r.workGone {
				r.problems = append(r.problems, fmt.Sprintf("%s asked to stop at %s, before the workload was gone at %s", key, at, r.workGone))
			}
		}
	}
	if r.minHealthy < sbsHeld-1 {
		r.problems = append(r.problems, fmt.Sprintf("the budget was broken: %d of the Deployment's pods healthy at one moment", r.minHealthy))
	}
	return r
}

// ownGrace: a deletion with the pod's own grace. The API server gives a
// running pod whose grace is 0 one second (only a forced deletion is
// immediate).
func ownGrace(spec int64, deletion *int64) bool {
	return deletion != nil && (*deletion == spec || spec == 0 && *deletion == 1)
}

func graceText(g *int64) string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%ds", *g)
}

func isDaemonSetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
