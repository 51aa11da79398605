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
