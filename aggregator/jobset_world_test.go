package aggregator_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

var jobSets = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// TestJobSetRestartsOnceOnASliceMaintenance: the JobSet the README
// recommends, applied as written (the test world adds its namespace and
// keeps kwok from completing the pods on its own), under JobSet's own
// controller, runs a pod on each host of a 4-host slice with an agent on
// each. One host is preempted: every host drains with it, each pod stopped
// with a grace that ends by the preempted host's deadline. The Job fails by
// its podFailurePolicy, and JobSet restarts it once, counting nothing
// against maxRestarts; once the host is back the restarted job runs on all
// four hosts, and JobSet has not restarted it again.
func TestJobSetRestartsOnceOnASliceMaintenance(t *testing.T) {
	testworld.Need(t)
	world.JobSet(t)
	ctx := testworld.Ctx(t, 6*time.Minute)
	s := newSliceHosts(t, ctx, "js", 4)
	js := recommendedJobSet(t)
	js.SetNamespace(s.p.ns)
	dyn, err := dynamic.NewForConfig(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	sets := dyn.Resource(jobSets).Namespace(s.p.ns)
	if _, err := sets.Create(ctx, js, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the README's JobSet: %v", err)
	}
	s.follow(t, ctx, "js")
	var pods []string
	list, err := world.Client.CoreV1().Pods(s.p.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		pods = append(pods, p.Name)
	}
	w, err := sets.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=train"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	deadline := s.preempt(t, ctx, "js-1")
	s.drainedWith(t, ctx, deadline, []string{"js-0", "js-2", "js-3"}, pods)
	restarted := waitJobSet(t, w, "restarted once", func(js *unstructured.Unstructured) bool { return restarts(js, "restarts") >= 1 })
	if got := restarts(restarted, "restartsCountTowardsMax"); got != 0 {
		t.Errorf("restartsCountTowardsMax = %d after a slice maintenance, want 0 (the README's rule ignores it)", got)
	}

	if err := s.p.f.Reboot(ctx, s.vms["js-1"]); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, s.hosts, "went back in service after js-1 came back", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Phase == protocol.PhaseIdle && !protocol.HasTaint(n) && !n.Spec.Unschedulable
	})
	// The restarted job's pods run again, one on every host.
	if err := waitRunningOnEveryHost(ctx, s); err != nil {
		t.Fatal(err)
	}
	cur, err := sets.Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, counted := restarts(cur, "restarts"), restarts(cur, "restartsCountTowardsMax"); got != 1 || counted != 0 {
		t.Errorf("restarts %d, restartsCountTowardsMax %d once the job runs again; want 1 and 0", got, counted)
	}
	if terminal, _, _ := unstructured.NestedString(cur.Object, "status", "terminalState"); terminal != "" {
		t.Errorf("the JobSet ended (%s); want it running", terminal)
	}
}

// recommendedJobSet is the JobSet in the README's block after the
// jobset-recommended marker, with kwok told not to complete its pods.
func recommendedJobSet(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	readme, err := os.ReadFile("../docs/workloads.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- jobset-recommended:")
	if !ok {
		t.Fatal("docs/workloads.md has no jobset-recommended block")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, _ := strings.Cut(rest, "```")
	js := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(block), &js.Object); err != nil {
		t.Fatalf("the README's JobSet: %v", err)
	}
	jobs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, j := range jobs {
		// kwok completes a Job's running pod within seconds unless told
		// to wait: a day.
		_ = unstructured.SetNestedStringMap(j.(map[string]any), map[string]string{
			"pod-complete.stage.kwok.x-k8s.io/delay": "24h", "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "24h",
		}, "template", "spec", "template", "metadata", "annotations")
	}
	if err := unstructured.SetNestedSlice(js.Object, jobs, "spec", "replicatedJobs"); err != nil {
		t.Fatal(err)
	}
	return js
}

// waitJobSet waits on w until the JobSet is what want says, and returns
// it.
func waitJobSet(t *testing.T, w watch.Interface, what string, want func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the JobSet's watch ended before it %s", what)
			}
			if js, isJS := ev.Object.(*unstructured.Unstructured); isJS && want(js) {
				return js
			}
		case <-timeout:
			t.Fatalf("the JobSet never %s", what)
		}
	}
}

func restarts(js *unstructured.Unstructured, field string) int64 {
	n, _, _ := unstructured.NestedInt64(js.Object, "status", field)
	return n
}

// waitRunningOnEveryHost waits until a pod runs on every host of s (as
// the pods are listed, then as they are watched).
func waitRunningOnEveryHost(ctx context.Context, s *slice) error {
	list, err := world.Client.CoreV1().Pods(s.p.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	running := map[string]string{} // pod -> host
	seen := func(p *corev1.Pod, gone bool) bool {
		if !gone && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running[p.Name] = p.Spec.NodeName
		} else {
			delete(running, p.Name)
		}
		hosts := map[string]bool{}
		for _, h := range running {
			hosts[h] = true
		}
		return len(hosts) == len(s.hosts)
	}
	for i := range list.Items {
		if seen(&list.Items[i], false) {
			return nil
		}
	}
	w, err := world.Client.CoreV1().Pods(s.p.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && seen(p, ev.Type == watch.Deleted) {
			return nil
		}
	}
	return fmt.Errorf("the restarted job's pods never ran on every host: %v (%w)", running, ctx.Err())
}
