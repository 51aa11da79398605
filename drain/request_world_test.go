package drain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// responded is a pod that names an eviction responder of its own: the
// EvictionRequest API (lifecycle.k8s.io/v1alpha1) is for it.
func responded(ns, name, node string) *corev1.Pod {
	p := podSpec(ns, name, node, 10, time.Second, nil)
	priority := int32(10000)
	p.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: "checkpointer.example.com/trainer", Priority: &priority}}
	return p
}

// requesting starts node with a pod "trainer" that names an eviction
// responder, and a plain pod of each name in plain, and a drainer of the
// node that asks through EvictionRequests: it returns the trainer as the
// API server holds it, the drainer and what it records.
func requesting(t *testing.T, node string, plain ...string) (*corev1.Pod, *drain.Drainer, *recorder) {
	t.Helper()
	needEvictionRequests(t)
	addNode(t, node)
	ns := world.Namespace(t)
	create(t, responded(ns, "trainer", node))
	for _, name := range plain {
		create(t, podSpec(ns, name, node, 10, time.Second, nil))
	}
	world.WaitRunning(t, node, 1+len(plain))
	trainer, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "trainer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	return trainer, drain.New(drain.Options{Client: apiClient(t), Requests: apiClient(t), Pods: startPods(t, node), Recorder: rec, Events: rec}), rec
}

// needEvictionRequests skips t where the world serves no EvictionRequests
// (before Kubernetes 1.37, whose alpha API the world turns on).
func needEvictionRequests(t *testing.T) {
	t.Helper()
	if !world.Serves(t, "lifecycle.k8s.io/v1alpha1", "evictionrequests") {
		t.Skipf("EvictionRequests not served on Kubernetes %s (alpha from 1.37)", testworld.KubernetesVersion)
	}
}

// awaitRequest waits, through a watch, for the drain's EvictionRequest for
// pod p to hold intent, and returns it.
func awaitRequest(t *testing.T, p *corev1.Pod, intent lifecyclev1alpha1.EvictionRequestIntent) *lifecyclev1alpha1.EvictionRequest {
	t.Helper()
	name := drain.RequestName(p)
	var got *lifecyclev1alpha1.EvictionRequest
	testworld.WaitFor(t, world.Client.LifecycleV1alpha1().RESTClient(), "evictionrequests", p.Namespace, name, "its EvictionRequest with intent "+string(intent),
		func(r *lifecyclev1alpha1.EvictionRequest) bool {
			got = r
			return r.Spec.Intent == intent
		})
	return got
}

// TestDrainAsksThroughEvictionRequests: with the EvictionRequest API, a pod
// that names eviction responders is asked for through an EvictionRequest
// (the agent's requester, the pod's UID, owned by the pod), and its
// responder, here the test, stops it; a pod that names none is evicted
// through the Eviction API as ever. Neither is deleted by the drain.
func TestDrainAsksThroughEvictionRequests(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	trainer, d, rec := requesting(t, "drain-request-0", "plain")
	ns := trainer.Namespace
	done := make(chan error, 1)
	var res drain.Result
	go func() {
		var err error
		res, err = d.Drain(testworld.Ctx(t, 2*time.Minute), time.Now().Add(90*time.Second), hostMaintenance)
		done <- err
	}()

	r := awaitRequest(t, trainer, lifecyclev1alpha1.EvictionRequestIntentEviction)
	target := r.Spec.Target.Pod
	if r.Spec.Requester != protocol.EvictionRequester || target == nil || target.Name != "trainer" || target.UID != trainer.UID ||
		len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != trainer.UID {
		t.Errorf("EvictionRequest %+v, owners %+v; want requester %s, the trainer's name and UID, owned by it", r.Spec, r.OwnerReferences, protocol.EvictionRequester)
	}
	// The responder checkpoints, then stops its pod.
	grace := int64(10)
	if err := world.Client.CoreV1().Pods(ns).Delete(testworld.Ctx(t, 10*time.Second), "trainer", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 1 || res.Deleted != 0 || len(res.Left) != 0 || rec.count(drain.OutcomeRequested) != 1 {
		t.Errorf("result %+v, outcomes %v; want the plain pod evicted, the trainer requested, none deleted or left", res, rec.outcomes)
	}
}

// TestDrainWithdrawsItsRequestWhenCancelled: a drain cancelled (the
// maintenance called off) while a pod's responders work on its
// EvictionRequest withdraws the request; the pod stays.
func TestDrainWithdrawsItsRequestWhenCancelled(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	trainer, d, rec := requesting(t, "drain-request-1")
	ns := trainer.Namespace
	ctx, cancel := context.WithCancel(testworld.Ctx(t, 2*time.Minute))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := d.DrainVoluntary(ctx, time.Now().Add(time.Hour))
		done <- err
	}()
	awaitRequest(t, trainer, lifecyclev1alpha1.EvictionRequestIntentEviction)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled drain returned no error")
	}
	awaitRequest(t, trainer, lifecyclev1alpha1.EvictionRequestIntentWithdrawn)
	if p, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "trainer", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the trainer was stopped: %v", err)
	}
	if rec.count(drain.OutcomeEvicted) != 0 || rec.count(drain.OutcomeRequested) != 1 {
		t.Errorf("outcomes %v; want one request and no eviction", rec.outcomes)
	}
}

// TestDrainDeletesARequestedPodAtItsFallback: no responder acts on the
// request; at the last moment that leaves the pod its grace, a drain that
// must end by the VM's stop deletes it, and says why.
func TestDrainDeletesARequestedPodAtItsFallback(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	_, d, rec := requesting(t, "drain-request-2")
	res, err := d.Drain(testworld.Ctx(t, 2*time.Minute), time.Now().Add(20*time.Second), hostMaintenance)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 1 || rec.count(drain.OutcomeRequested) != 1 {
		t.Errorf("result %+v, outcomes %v; want the trainer requested, then deleted", res, rec.outcomes)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	said := false
	for i, r := range rec.events {
		said = said || r == protocol.EventEscalated && strings.Contains(rec.messages[i], "asked for through an EvictionRequest")
	}
	if !said {
		t.Errorf("events %q %q; want the delete said, naming the request", rec.events, rec.messages)
	}
}
