package manifests_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// shippedImage is the image the base names (maintenance-handler:dev), as
// containerd normalises it.
const shippedImage = "docker.io/library/maintenance-handler:dev"

// renderForRealNode renders the base with the test overlay and nothing
// more: the agent's metadata server is the emulator at metadataHost (its
// GCE_METADATA_HOST, which the official client honours). The overlay is a
// kustomization of its own over a copy of the base, rendered as
// `kubectl apply -k` renders it.
func renderForRealNode(t testing.TB, metadataHost string) []*unstructured.Unstructured {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob("base/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("base: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("/base/"+filepath.Base(f), data); err != nil {
			t.Fatal(err)
		}
	}
	overlay := `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../base]
patches:
  - target: {kind: DaemonSet, name: maintenance-handler-agent}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: GCE_METADATA_HOST, value: "` + metadataHost + `"}
  # The world has one real node, an accelerator node: both replicas run on
  # it, which the shipped placement forbids (TestAggregatorOffTheNodesItMaintains).
  - target: {kind: Deployment, name: maintenance-handler-aggregator}
    patch: |-
      - op: remove
        path: /spec/template/spec/affinity
      - op: remove
        path: /spec/template/spec/topologySpreadConstraints
`
	if err := fs.WriteFile("/overlay/kustomization.yaml", []byte(overlay)); err != nil {
		t.Fatal(err)
	}
	return renderFS(t, fs, "/overlay")
}

// shippedImageLayout builds the project's image for this machine's
// platform as make image does, into a temp folder.
func shippedImageLayout(t testing.TB) string {
	t.Helper()
	root, err := testworld.ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	cmd := exec.Command("go", "run", "./build/image", "-o", dir, "-version", "e2e", "-platforms", "linux/amd64")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return dir
}

// realGPUNode starts a real node labelled as a GKE GPU node of pool
// real-pool, holding the shipped image and the workload's, and waits
// until the shipped DaemonSet's agent is Ready on it.
func realGPUNode(t testing.TB, name, layout string) (*testworld.RealNode, *corev1.Pod) {
	t.Helper()
	n := world.RealNodeT(t, testworld.RealNodeOptions{Name: name, Labels: map[string]string{
		testworld.LabelGPUAccelerator: "nvidia-h100-80gb",
		testworld.LabelNodePool:       "real-pool",
	}})
	ctx := testworld.Ctx(t, 5*time.Minute)
	if err := n.ImportLayout(ctx, shippedImage, layout); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportWorkload(ctx); err != nil {
		t.Fatal(err)
	}
	return n, agentPodOn(t, name)
}

// agentPodOn waits until the agent DaemonSet's pod on node is Ready and
// returns it; it logs how long after its container was seen running.
func agentPodOn(t testing.TB, node string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	var running time.Time
	world.WaitPods(t, testworld.ShippedAgentNamespace, "app.kubernetes.io/component=agent", "the agent Ready on "+node, func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Spec.NodeName != node || p.DeletionTimestamp != nil {
				continue
			}
			if running.IsZero() && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
				running = time.Now()
			}
			if testworld.PodReady(p) {
				found = p
				return true
			}
		}
		return false
	})
	if !running.IsZero() {
		d := time.Since(running)
		readyAfter.Store(node, d)
		t.Logf("the agent on %s was Ready %.2fs after its container was seen running", node, d.Seconds())
	}
	return found
}

// readyAfter holds, by node, how long after its container was seen
// running the agent's pod was seen Ready (agentPodOn).
var readyAfter sync.Map

// shippedOnRealNodes applies the base with the test overlay, its agents
// pointed at an emulated metadata server, and builds the image that real
// nodes (realGPUNode) then hold. It skips tb with one line where the
// machine cannot run a real node.
func shippedOnRealNodes(tb testing.TB) (*gceemu.Server, string) {
	tb.Helper()
	testworld.Need(tb)
	if err := testworld.RealNodeSupport(); err != nil {
		tb.Skipf("real node: skipped: %v", err)
	}
	emu := gceemu.New(gceemu.Config{Name: "real-gpu", Project: "p", Zone: "z"})
	if err := emu.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = emu.Close() })
	layout := shippedImageLayout(tb)
	apply(tb, renderForRealNode(tb, emu.Host()))
	return emu, layout
}

// TestShippedManifestsOnARealNode runs the kustomize base as it ships, with
// the image built without a container engine, on a real kubelet and
// container runtime: the agent's DaemonSet pod (hostNetwork, probes,
// limits, user 65532, read-only root, its pod-bound token) and the
// aggregator's Deployment come up, and real processes meet our drain.
func TestShippedManifestsOnARealNode(t *testing.T) {
	emu, layout := shippedOnRealNodes(t)

	t.Run("AgentAndAggregatorAsShipped", func(t *testing.T) { realAgentAndAggregator(t, emu, layout) })
	// The other scenarios drain the world's one real node, where the
	// replicas run: without them, the eviction check served from here.
	scaleAggregatorToZero(t)
	hostEvictionCheck(t, "maintenance-handler")
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *gceemu.Server, string)
	}{
		{"NoticeReachesTheContainer", realNoticeLatency},
		{"Preemption", realPreemption},
		{"HostMaintenanceHonoursTheBudget", realHostMaintenancePDB},
		{"AgentKilledMidDrain", realAgentKilledMidDrain},
		{"JobIgnoresTheDisruption", realJobDisruption},
	} {
		emu.Clear()
		t.Run(sc.name, func(t *testing.T) { sc.run(t, emu, layout) })
	}
}

// realAgentAndAggregator: the agent runs in its pod as the manifest says
// (user 65532, read-only root) and writes its own Node; the aggregator's
// Deployment runs its two replicas with the image's aggregator entrypoint
// and its RBAC, and one of them leads.
func realAgentAndAggregator(t *testing.T, emu *gceemu.Server, layout string) {
	n, agent := realGPUNode(t, "real-gpu-shipped", layout)
	procs := n.Processes("/usr/local/bin/agent")
	if len(procs) != 1 {
		t.Fatalf("agent processes on the node: %v, want one", procs)
	}
	if p := procs[0]; p.UID != 65532 || !p.ReadOnlyRoot {
		t.Errorf("agent process %d: uid %d, read-only root %t; want 65532 and true", p.Pid, p.UID, p.ReadOnlyRoot)
	}
	if !agent.Spec.HostNetwork {
		t.Errorf("agent pod %s is not on the host network", agent.Name)
	}
	// A scheduled notice: the agent, with its pod-bound token, labels its
	// own Node (the admission policy lets it).
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(3*time.Hour), time.Hour))
	world.WaitNode(t, n.Name, "the scheduled maintenance mirrored by the agent", func(node *corev1.Node) bool {
		return node.Annotations[protocol.AnnotationUpcomingMaintenance] != ""
	})

	var leaders []string
	world.WaitPods(t, "maintenance-handler", "app.kubernetes.io/component=aggregator", "both aggregator replicas running on "+n.Name, func(pods []*corev1.Pod) bool {
		leaders = leaders[:0]
		for _, p := range pods {
			if p.Spec.NodeName == n.Name && p.Status.Phase == corev1.PodRunning && testworld.PodReady(p) {
				leaders = append(leaders, p.Name)
			}
		}
		return len(leaders) == 2
	})
	lease := testworld.WaitFor(t, world.Client.CoordinationV1().RESTClient(), "leases", "maintenance-handler", "maintenance-handler-aggregator", "held by a replica",
		func(l *coordinationv1.Lease) bool {
			return l.Spec.HolderIdentity != nil && (*l.Spec.HolderIdentity == leaders[0] || *l.Spec.HolderIdentity == leaders[1])
		})
	t.Logf("aggregator replicas %v; leader %s", leaders, *lease.Spec.HolderIdentity)

	// The eviction check, as shipped: the replicas serve it through its
	// Service, with the certificate they made. The agent's token (bound
	// to its pod) evicts a pod on its own node, not one on another.
	tr := agentToken(t, agent)
	as, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	other := world.NodeT(t, testworld.NodeSpec{Name: "real-shipped-other"})
	ns := world.Namespace(t)
	podOn(t, ns, "elsewhere", other.Name)
	podOn(t, ns, "mine", n.Name)
	err = evictWhenServed(t, as, ns, "elsewhere")
	if err == nil || !strings.Contains(err.Error(), "may evict only the pods on its own Node ("+n.Name+"), not "+ns+"/elsewhere on "+other.Name) {
		t.Errorf("evicting a pod on another node through the replicas' check: %v, want refused by the check", err)
	}
	if err := evictWhenServed(t, as, ns, "mine"); err != nil {
		t.Errorf("evicting a pod on its own node through the replicas' check: %v", err)
	}
}

// scaleAggregatorToZero scales the aggregator's Deployment to no replica
// and waits until none is left.
func scaleAggregatorToZero(t testing.TB) {
	t.Helper()
	deployments := world.Client.AppsV1().Deployments("maintenance-handler")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := deployments.GetScale(testworld.Ctx(t, 10*time.Second), "maintenance-handler-aggregator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = 0
		_, err = deployments.UpdateScale(testworld.Ctx(t, 10*time.Second), "maintenance-handler-aggregator", scale, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	world.WaitPods(t, "maintenance-handler", "app.kubernetes.io/component=aggregator", "no aggregator replica", func(pods []*corev1.Pod) bool { return len(pods) == 0 })
}

// realNoticeLatency: each change of the VM's upcoming maintenance reaches
// the file a container reads (the downward API over the agent's pod
// annotation); the latency from the metadata change to the container
// seeing it, over 20 changes.
func realNoticeLatency(t *testing.T, emu *gceemu.Server, layout string) {
	n, _ := realGPUNode(t, "real-gpu-notice", layout)
	ns := world.Namespace(t)
	createWorkload(t, n, testworld.Workload{Namespace: ns, Name: "reader", Grace: 1, ExitOnSIGTERM: true})
	n.WaitRecord(t, ns, "reader", "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
	toPod, toFile := noticeLatencies(t, n, emu, ns, "reader", 20)
	for _, l := range [][]time.Duration{toPod, toFile} {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	t.Logf("after the metadata change, over %d changes: the pod's annotation p50 %s, max %s; the container's file p50 %s, max %s",
		len(toFile), toPod[len(toPod)/2].Round(time.Millisecond), toPod[len(toPod)-1].Round(time.Millisecond),
		toFile[len(toFile)/2].Round(time.Millisecond), toFile[len(toFile)-1].Round(time.Millisecond))
}

// noticeLatencies moves the VM's scheduled maintenance count times and
// returns, for each, how long after the change the pod's notice
// annotation was seen changed (through a watch: at most that long) and
// how long after it the workload ns/name saw its new window start in its
// notice file.
func noticeLatencies(t testing.TB, n *testworld.RealNode, emu *gceemu.Server, ns, name string, count int) (toPod, toFile []time.Duration) {
	base := time.Now().Add(2 * time.Hour).Truncate(time.Minute)
	for i := range count {
		start := base.Add(time.Duration(i) * time.Minute)
		want := "MAINTENANCE_WINDOW_START=" + strconv.FormatInt(start.Unix(), 10)
		changed := time.Now()
		emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
		world.WaitPod(t, ns, name, "annotated with "+want, func(p *corev1.Pod) bool {
			return strings.Contains(p.Annotations[protocol.PodAnnotationNotice], want+"\n")
		})
		toPod = append(toPod, time.Since(changed))
		rec := n.WaitRecord(t, ns, name, "the notice with "+want, func(r []testworld.RecordEvent) bool {
			return seen(r, want) != nil
		})
		toFile = append(toFile, seen(rec, want).At.Sub(changed))
	}
	return toPod, toFile
}

// seen is the first notice event that holds want, or nil.
func seen(rec []testworld.RecordEvent, want string) *testworld.RecordEvent {
	for i, e := range rec {
		if e.Event == "notice" && strings.Contains(";"+e.Detail+";", ";"+want+";") {
			return &rec[i]
		}
	}
	return nil
}

// preemptionRun is what the processes of a real node met under a 30 s
// preemption: a workload that exits on SIGTERM, one that uses its whole
// grace, one with a checkpoint lead, a kube-system pod, and a DaemonSet's
// pod (the last group, whose grace ends nearest the stop), in that order.
type preemptionRun struct {
	pods     []testworld.Workload
	deadline time.Time
	sigterm  map[string]time.Time
	sigterms map[string]int
	// The pod with a lead: when it checkpointed, and the time it was told.
	checkpoint, told time.Time
}

// runPreemption preempts n's VM with those pods on it and reads their
// records once the drain is over.
func runPreemption(t testing.TB, n *testworld.RealNode, emu *gceemu.Server) preemptionRun {
	t.Helper()
	ns := world.Namespace(t)
	r := preemptionRun{sigterm: map[string]time.Time{}, sigterms: map[string]int{}, pods: []testworld.Workload{
		{Namespace: ns, Name: "quick", Grace: 3, ExitOnSIGTERM: true},
		{Namespace: ns, Name: "whole-grace", Grace: 8},
		{Namespace: ns, Name: "lead", Grace: 4, Annotations: map[string]string{protocol.PodAnnotationCheckpointLead: "5m"}},
		{Namespace: "kube-system", Name: "sys-" + ns, Grace: 2},
	}}
	startWorkloads(t, n, r.pods...)
	r.pods = append(r.pods, startDaemonSetPod(t, n, testworld.Workload{Namespace: ns, Name: "ds", Grace: 3}))
	emu.SetPreempted(true)
	node := world.WaitNode(t, n.Name, "terminating: drained", func(node *corev1.Node) bool {
		return node.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	var err error
	if r.deadline, err = time.Parse(time.RFC3339Nano, node.Annotations[protocol.AnnotationDeadline]); err != nil {
		t.Fatalf("deadline: %v", err)
	}
	for _, w := range r.pods {
		rec := n.WaitRecord(t, w.Namespace, w.Name, "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
		got, _ := testworld.First(rec, "sigterm")
		r.sigterm[w.Name] = got.At
		r.sigterms[w.Name] = testworld.Count(rec, "sigterm")
		if w.Name == "lead" {
			cp, ok := testworld.First(rec, "checkpoint")
			if !ok {
				t.Fatalf("the pod with a lead never saw the maintenance start: %v", rec)
			}
			told, err := strconv.ParseInt(cp.Detail, 10, 64)
			if err != nil {
				t.Fatalf("MAINTENANCE_EVICT_AT %q: %v", cp.Detail, err)
			}
			r.checkpoint, r.told = cp.At, time.Unix(told, 0)
		}
	}
	return r
}

// margin is how long before the VM's stop the last grace ended.
func (r preemptionRun) margin() time.Duration {
	least := time.Duration(1<<62 - 1)
	for _, w := range r.pods {
		least = min(least, r.deadline.Sub(r.sigterm[w.Name].Add(time.Duration(w.Grace)*time.Second)))
	}
	return least
}

// realPreemption: under a 30 s preemption every process gets SIGTERM in
// drain order (workloads, then kube-system), each one's grace ends before
// the VM's stop, the node says Drained beside the kubelet's conditions,
// and a pod with a checkpoint lead checkpoints when told and gets SIGTERM
// within a second after the time it was told.
func realPreemption(t *testing.T, emu *gceemu.Server, layout string) {
	n, _ := realGPUNode(t, "real-gpu-preempt", layout)
	r := runPreemption(t, n, emu)
	// The node lifecycle conditions, beside the real kubelet's own.
	world.WaitNode(t, n.Name, "Drained and MaintenanceInProgress beside the kubelet's conditions", func(node *corev1.Node) bool {
		on := map[corev1.NodeConditionType]bool{}
		for _, c := range node.Status.Conditions {
			on[c.Type] = c.Status == corev1.ConditionTrue
		}
		return on[protocol.ConditionDrained] && on[protocol.ConditionMaintenanceInProgress] && on[corev1.NodeReady]
	})
	for _, w := range r.pods {
		at := r.sigterm[w.Name]
		end := at.Add(time.Duration(w.Grace) * time.Second)
		t.Logf("%-12s SIGTERM at deadline-%.2fs, grace %ds ends at deadline-%.2fs", w.Name, r.deadline.Sub(at).Seconds(), w.Grace, r.deadline.Sub(end).Seconds())
		if end.After(r.deadline) {
			t.Errorf("%s: SIGTERM at %s with grace %ds: still inside its grace at the VM's stop %s", w.Name, at.Format(time.StampMilli), w.Grace, r.deadline.Format(time.StampMilli))
		}
		if c := r.sigterms[w.Name]; c != 1 {
			t.Errorf("%s got SIGTERM %d times, want once", w.Name, c)
		}
	}
	sys, ds := r.sigterm[r.pods[3].Name], r.sigterm[r.pods[4].Name]
	for _, w := range r.pods[:3] {
		if !r.sigterm[w.Name].Before(sys) {
			t.Errorf("workload %s got SIGTERM at %s, not before the kube-system pod's at %s", w.Name, r.sigterm[w.Name].Format(time.StampMilli), sys.Format(time.StampMilli))
		}
	}
	if !sys.Before(ds) {
		t.Errorf("the DaemonSet's pod got SIGTERM at %s, not after the kube-system pod's at %s", ds.Format(time.StampMilli), sys.Format(time.StampMilli))
	}
	lead := r.sigterm["lead"]
	if late := lead.Sub(r.told); late < 0 || late >= time.Second || !r.checkpoint.Before(lead) {
		t.Errorf("the pod with a lead checkpointed at %s, was told %s and got SIGTERM at %s: want the checkpoint first and SIGTERM within a second after the time told",
			r.checkpoint.Format(time.StampMilli), r.told.Format(time.StampMilli), lead.Format(time.StampMilli))
	} else {
		t.Logf("lead: told %s, SIGTERM %.3fs after it; the last grace ended %.2fs before the stop", r.told.Format(time.TimeOnly), late.Seconds(), r.margin().Seconds())
	}
}

// realHostMaintenancePDB: under host maintenance a PodDisruptionBudget
// holds: of two replicas allowed one disruption, whose replacements cannot
// start (the node is cordoned), one gets SIGTERM and the other keeps
// running while the agent says it is blocked.
func realHostMaintenancePDB(t *testing.T, emu *gceemu.Server, layout string) {
	n, _ := realGPUNode(t, "real-gpu-pdb", layout)
	ns := world.Namespace(t)
	labels := map[string]string{"app": "guarded"}
	tmpl := n.WorkloadPod(testworld.Workload{Namespace: ns, Name: "guarded", Grace: 2, ExitOnSIGTERM: true, Labels: labels})
	tmpl.Spec.NodeName = ""
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
	two := int32(2)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guarded"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}
	if _, err := world.Client.AppsV1().Deployments(ns).Create(testworld.Ctx(t, 10*time.Second), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Create(testworld.Ctx(t, 10*time.Second), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var original []*corev1.Pod
	world.WaitPods(t, ns, "app=guarded", "two replicas ready", func(pods []*corev1.Pod) bool {
		original = original[:0]
		for _, p := range pods {
			if testworld.PodReady(p) {
				original = append(original, p)
			}
		}
		return len(original) == 2
	})
	testworld.WaitFor(t, world.Client.PolicyV1().RESTClient(), "poddisruptionbudgets", ns, "guarded", "one disruption allowed",
		func(p *policyv1.PodDisruptionBudget) bool { return p.Status.DisruptionsAllowed == 1 })

	emu.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE")
	world.WaitEvent(t, n.Name, protocol.EventBlocked)
	// The budget let one eviction through: that replica is being deleted
	// and gets SIGTERM; the other is not, and does not.
	var evicted, held []string
	world.WaitPods(t, ns, "app=guarded", "one of the two replicas evicted", func(pods []*corev1.Pod) bool {
		evicted, held = evicted[:0], held[:0]
		for _, p := range pods {
			if p.Name != original[0].Name && p.Name != original[1].Name {
				continue // a replacement, which cannot start on the cordoned node
			}
			if p.DeletionTimestamp != nil {
				evicted = append(evicted, p.Name)
			} else {
				held = append(held, p.Name)
			}
		}
		return len(evicted) == 1 && len(held) == 1
	})
	n.WaitRecord(t, ns, evicted[0], "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
	rec, err := n.Record(ns, held[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := testworld.First(rec, "sigterm"); ok {
		t.Errorf("replica %s, held by the budget, got SIGTERM: %v", held[0], rec)
	}
}

// realAgentKilledMidDrain: under host maintenance the workloads get
// SIGTERM, then the kube-system pod; the agent's container is killed while
// the drain is under way; the kubelet restarts it and the drain finishes
// once: each process gets one SIGTERM, in order, and the Node one
// completion.
func realAgentKilledMidDrain(t *testing.T, emu *gceemu.Server, layout string) {
	n, agent := realGPUNode(t, "real-gpu-restart", layout)
	ns := world.Namespace(t)
	pods := []testworld.Workload{
		{Namespace: ns, Name: "first", Grace: 6},
		{Namespace: ns, Name: "second", Grace: 10},
		{Namespace: "kube-system", Name: "sys-" + ns, Grace: 2},
	}
	startWorkloads(t, n, pods...)
	emu.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE")
	n.WaitRecord(t, ns, "first", "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
	procs := n.Processes("/usr/local/bin/agent")
	if len(procs) != 1 {
		t.Fatalf("agent processes: %v, want one", procs)
	}
	if err := syscall.Kill(procs[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	world.WaitPod(t, agent.Namespace, agent.Name, "restarted by the kubelet and Ready", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 && testworld.PodReady(p)
	})
	world.WaitNode(t, n.Name, "terminating: drained", func(node *corev1.Node) bool {
		return node.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	sigterm := sigtermOnce(t, n, pods)
	// The system group starts when the workloads are gone: after the
	// longest grace, which the second one uses whole.
	if sys, second := sigterm[pods[2].Name], sigterm["second"]; sys.Sub(second) < 10*time.Second {
		t.Errorf("the kube-system pod got SIGTERM %s after the workload with a 10 s grace; want after that workload was gone", sys.Sub(second))
	}
	world.WaitEvent(t, n.Name, protocol.EventEvictionComplete)
	if c := eventCount(t, n.Name, protocol.EventEvictionComplete); c != 1 {
		t.Errorf("%d %s Events on %s, want 1", c, protocol.EventEvictionComplete, n.Name)
	}
}

// eventCount sums the counts of node's Events with reason.
func eventCount(t testing.TB, node, reason string) int {
	t.Helper()
	list, err := world.Client.CoreV1().Events("").List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range list.Items {
		total += int(max(e.Count, 1))
	}
	return total
}

// createWorkload creates w's pod on n and deletes it when t ends.
func createWorkload(t testing.TB, n *testworld.RealNode, w testworld.Workload) {
	t.Helper()
	if _, err := world.Client.CoreV1().Pods(w.Namespace).Create(testworld.Ctx(t, 10*time.Second), n.WorkloadPod(w), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = world.Client.CoreV1().Pods(w.Namespace).Delete(context.Background(), w.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// startDaemonSetPod makes a DaemonSet of w's pod on n alone, waits until
// its pod has started, and returns w named as that pod.
func startDaemonSetPod(t testing.TB, n *testworld.RealNode, w testworld.Workload) testworld.Workload {
	t.Helper()
	labels := map[string]string{"daemonset": w.Name}
	tmpl := n.WorkloadPod(w)
	tmpl.Spec.NodeName = ""
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}}}
	if _, err := world.Client.AppsV1().DaemonSets(w.Namespace).Create(testworld.Ctx(t, 10*time.Second), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.AppsV1().DaemonSets(w.Namespace).Delete(context.Background(), w.Name, metav1.DeleteOptions{})
	})
	world.WaitPods(t, w.Namespace, "daemonset="+w.Name, "the DaemonSet's pod", func(pods []*corev1.Pod) bool {
		if len(pods) == 1 {
			w.Name = pods[0].Name
		}
		return len(pods) == 1
	})
	n.WaitRecord(t, w.Namespace, w.Name, "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
	return w
}

// startWorkloads creates pods on n and waits until each has started.
func startWorkloads(t testing.TB, n *testworld.RealNode, pods ...testworld.Workload) {
	t.Helper()
	for _, w := range pods {
		createWorkload(t, n, w)
	}
	for _, w := range pods {
		n.WaitRecord(t, w.Namespace, w.Name, "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
	}
}

// watchFailed watches pod ns/name from resourceVersion rv, and yields it
// as it was when it first failed (the watch ends with the test).
func watchFailed(t *testing.T, ns, name, rv string) <-chan *corev1.Pod {
	t.Helper()
	w, err := world.Client.CoreV1().Pods(ns).Watch(testworld.Ctx(t, 10*time.Minute), metav1.ListOptions{ResourceVersion: rv,
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	out := make(chan *corev1.Pod, 1)
	go func() {
		for e := range w.ResultChan() {
			if p, ok := e.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodFailed {
				out <- p
				return
			}
		}
	}()
	return out
}

// realJobDisruption: two Jobs of one pod each, backoffLimit 0, each pod
// held by a PodDisruptionBudget, on a node that is preempted: the drain
// deletes each pod when its budget still holds at deadline - grace, and
// sets its DisruptionTarget condition first, as Kubernetes' own deleters
// do. The Job whose podFailurePolicy ignores DisruptionTarget keeps its
// backoffLimit whole and makes a replacement pod; the Job without such a
// rule fails, as Kubernetes documents.
func realJobDisruption(t *testing.T, emu *gceemu.Server, layout string) {
	n, _ := realGPUNode(t, "real-gpu-job", layout)
	ns := world.Namespace(t)
	ignore := &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}}}
	for name, policy := range map[string]*batchv1.PodFailurePolicy{"ignores": ignore, "counts": nil} {
		labels := map[string]string{"job": name}
		tmpl := n.WorkloadPod(testworld.Workload{Namespace: ns, Name: name, Grace: 2, Labels: labels})
		tmpl.Spec.NodeName = ""
		tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		zero := int32(0)
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: batchv1.JobSpec{
			BackoffLimit: &zero, PodFailurePolicy: policy,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}}}
		if _, err := world.Client.BatchV1().Jobs(ns).Create(testworld.Ctx(t, 10*time.Second), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		world.WaitPods(t, ns, "job="+name, "the job's pod running", func(pods []*corev1.Pod) bool { return len(pods) == 1 && testworld.PodReady(pods[0]) })
		world.Budget(t, ns, name, labels, intstr.FromInt32(1), "holding its pod", func(p *policyv1.PodDisruptionBudget) bool {
			return p.Status.ExpectedPods == 1 && p.Status.DisruptionsAllowed == 0
		})
	}
	first := map[string]string{}
	// Each pod is watched from before the preemption: once failed, its
	// Job may remove it before the other's wait ends.
	failedOf := map[string]<-chan *corev1.Pod{}
	for _, name := range []string{"ignores", "counts"} {
		pods, err := world.Client.CoreV1().Pods(ns).List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{LabelSelector: "job=" + name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the %s job's pods: %v", name, err)
		}
		first[name] = pods.Items[0].Name
		failedOf[name] = watchFailed(t, ns, pods.Items[0].Name, pods.ResourceVersion)
	}

	emu.SetPreempted(true)
	// Each pod: deleted by the drain (the budget held), failed, and told
	// why before.
	for name, pod := range first {
		var failed *corev1.Pod
		select {
		case failed = <-failedOf[name]:
		case <-testworld.Ctx(t, 3*time.Minute).Done():
			t.Fatalf("the %s job's pod %s did not fail after the drain deleted it", name, pod)
		}
		var told *corev1.PodCondition
		for _, c := range failed.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				told = &c
			}
		}
		if told == nil || told.Status != corev1.ConditionTrue || told.Reason != protocol.DisruptionPreemption {
			t.Errorf("%s's pod %s failed with DisruptionTarget %+v, want True, %s", name, pod, told, protocol.DisruptionPreemption)
		}
	}
	world.WaitEvent(t, n.Name, protocol.EventEscalated)
	testworld.WaitFor(t, world.Client.BatchV1().RESTClient(), "jobs", ns, "counts", "failed: its backoffLimit of 0 used up", func(j *batchv1.Job) bool {
		return jobCondition(j, batchv1.JobFailed) == "BackoffLimitExceeded"
	})
	// The Job controller has taken in the failure it ignores: a
	// replacement pod, and the Job not failed.
	world.WaitPods(t, ns, "job=ignores", "a replacement for the disrupted pod", func(pods []*corev1.Pod) bool {
		return slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.Name != first["ignores"] })
	})
	j, err := world.Client.BatchV1().Jobs(ns).Get(testworld.Ctx(t, 10*time.Second), "ignores", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := jobCondition(j, batchv1.JobFailed); c != "" {
		t.Errorf("the job whose podFailurePolicy ignores DisruptionTarget failed (%s): status %+v", c, j.Status)
	}
}

// jobCondition is the reason of j's condition typ when it is True ("" when
// it is not).
func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) string {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// sigtermOnce waits until each of pods got SIGTERM, checks that each got
// it once, and returns when, by name.
func sigtermOnce(t testing.TB, n *testworld.RealNode, pods []testworld.Workload) map[string]time.Time {
	t.Helper()
	sigterm := map[string]time.Time{}
	for _, w := range pods {
		rec := n.WaitRecord(t, w.Namespace, w.Name, "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
		if c := testworld.Count(rec, "sigterm"); c != 1 {
			t.Errorf("%s got SIGTERM %d times, want once", w.Name, c)
		}
		at, _ := testworld.First(rec, "sigterm")
		sigterm[w.Name] = at.At
	}
	return sigterm
}
