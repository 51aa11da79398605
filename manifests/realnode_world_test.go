package manifests_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
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
func renderForRealNode(t *testing.T, metadataHost string) []*unstructured.Unstructured {
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
`
	if err := fs.WriteFile("/overlay/kustomization.yaml", []byte(overlay)); err != nil {
		t.Fatal(err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/overlay")
	if err != nil {
		t.Fatalf("kustomize the test overlay: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// shippedImageLayout builds the project's image for this machine's
// platform as make image does, into a temp folder.
func shippedImageLayout(t *testing.T) string {
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
func realGPUNode(t *testing.T, name, layout string) (*testworld.RealNode, *corev1.Pod) {
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
// returns it.
func agentPodOn(t *testing.T, node string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	world.WaitPods(t, "maintenance-handler", "app.kubernetes.io/component=agent", "the agent Ready on "+node, func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil && podReady(p) {
				found = p
				return true
			}
		}
		return false
	})
	return found
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestShippedManifestsOnARealNode runs the kustomize base as it ships, with
// the image built without a container engine, on a real kubelet and
// container runtime: the agent's DaemonSet pod (hostNetwork, probes,
// limits, user 65532, read-only root, its pod-bound token) and the
// aggregator's Deployment come up, and real processes meet our drain.
func TestShippedManifestsOnARealNode(t *testing.T) {
	testworld.Need(t)
	if err := testworld.RealNodeSupport(); err != nil {
		t.Skipf("real node: skipped: %v", err)
	}
	emu := gceemu.New(gceemu.Config{Name: "real-gpu", Project: "p", Zone: "z"})
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	layout := shippedImageLayout(t)
	world.WaitNamespaceGone(t, "maintenance-handler")
	apply(t, renderForRealNode(t, emu.Host()))

	t.Run("Preemption", func(t *testing.T) { realPreemption(t, emu, layout) })
	emu.Clear()
}

// realPreemption: under a 30 s preemption every process gets SIGTERM in
// drain order (workloads, then kube-system), each one's grace ends before
// the VM's stop, and a pod with a checkpoint lead checkpoints when told
// and gets SIGTERM within a second after the time it was told.
func realPreemption(t *testing.T, emu *gceemu.Server, layout string) {
	n, agent := realGPUNode(t, "real-gpu-preempt", layout)
	ns := world.Namespace(t)
	pods := []testworld.Workload{
		{Namespace: ns, Name: "quick", Grace: 3, ExitOnSIGTERM: true},
		{Namespace: ns, Name: "whole-grace", Grace: 8},
		{Namespace: ns, Name: "lead", Grace: 4, Annotations: map[string]string{protocol.PodAnnotationCheckpointLead: "5m"}},
		{Namespace: "kube-system", Name: "sys-" + ns, Grace: 2},
	}
	for _, w := range pods {
		createWorkload(t, n, w)
	}
	for _, w := range pods {
		n.WaitRecord(t, w.Namespace, w.Name, "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
	}
	emu.SetPreempted(true)
	node := world.WaitNode(t, n.Name, "terminating: drained", func(node *corev1.Node) bool {
		return node.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	deadline, err := time.Parse(time.RFC3339Nano, node.Annotations[protocol.AnnotationDeadline])
	if err != nil {
		t.Fatalf("deadline: %v", err)
	}
	sigterm := map[string]time.Time{}
	for _, w := range pods {
		rec := n.WaitRecord(t, w.Namespace, w.Name, "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
		got, _ := testworld.First(rec, "sigterm")
		sigterm[w.Name] = got.At
		end := got.At.Add(time.Duration(w.Grace) * time.Second)
		t.Logf("%-12s SIGTERM at deadline-%.2fs, grace %ds ends at deadline-%.2fs", w.Name, deadline.Sub(got.At).Seconds(), w.Grace, deadline.Sub(end).Seconds())
		if end.After(deadline) {
			t.Errorf("%s: SIGTERM at %s with grace %ds: still inside its grace at the VM's stop %s", w.Name, got.At.Format(time.StampMilli), w.Grace, deadline.Format(time.StampMilli))
		}
		if c := testworld.Count(rec, "sigterm"); c != 1 {
			t.Errorf("%s got SIGTERM %d times, want once", w.Name, c)
		}
	}
	sys := sigterm["sys-"+ns]
	for _, w := range pods[:3] {
		if !sigterm[w.Name].Before(sys) {
			t.Errorf("workload %s got SIGTERM at %s, not before the kube-system pod's at %s", w.Name, sigterm[w.Name].Format(time.StampMilli), sys.Format(time.StampMilli))
		}
	}
	rec, _ := n.Record(ns, "lead")
	cp, ok := testworld.First(rec, "checkpoint")
	if !ok {
		t.Fatalf("the pod with a lead never saw the maintenance start: %v", rec)
	}
	told, err := strconv.ParseInt(cp.Detail, 10, 64)
	if err != nil {
		t.Fatalf("MAINTENANCE_EVICT_AT %q: %v", cp.Detail, err)
	}
	at := time.Unix(told, 0)
	if late := sigterm["lead"].Sub(at); late < 0 || late >= time.Second || !cp.At.Before(sigterm["lead"]) {
		t.Errorf("the pod with a lead checkpointed at %s, was told %s and got SIGTERM at %s: want the checkpoint first and SIGTERM within a second after the time told",
			cp.At.Format(time.StampMilli), at.Format(time.StampMilli), sigterm["lead"].Format(time.StampMilli))
	} else {
		t.Logf("lead: told %s, SIGTERM %.3fs after it", at.Format(time.TimeOnly), late.Seconds())
	}
	_ = agent
}

// createWorkload creates w's pod on n and deletes it when t ends.
func createWorkload(t *testing.T, n *testworld.RealNode, w testworld.Workload) {
	t.Helper()
	if _, err := world.Client.CoreV1().Pods(w.Namespace).Create(testworld.Ctx(t, 10*time.Second), n.WorkloadPod(w), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = world.Client.CoreV1().Pods(w.Namespace).Delete(context.Background(), w.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

var (
	_ = fmt.Sprint
	_ = sort.Strings
	_ = strings.Cut
	_ = syscall.Kill
	_ appsv1.DaemonSet
	_ coordinationv1.Lease
)
