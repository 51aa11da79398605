package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestEvictionRequestsThroughTheBinary: the agent binary with
// --eviction-requests, under its shipped permissions, on a cluster that
// serves EvictionRequests. A host maintenance asks for the pod that names
// an eviction responder through an EvictionRequest, and evicts the one
// that names none; when Compute Engine withdraws the maintenance, the
// request is withdrawn and the pod stays.
func TestEvictionRequestsThroughTheBinary(t *testing.T) {
	testworld.Need(t)
	if !world.Serves(t, "lifecycle.k8s.io/v1alpha1", "evictionrequests") {
		t.Skipf("EvictionRequests not served on Kubernetes %s (alpha from 1.37)", testworld.KubernetesVersion)
	}
	ctx := testworld.Ctx(t, 5*time.Minute)
	ns := world.Namespace(t)
	const name = "bin-request-0"
	emu := setup(t, name)
	grace, priority := int64(10), int32(10000)
	for pod, responders := range map[string][]corev1.EvictionResponder{
		"trainer": {{Name: "checkpointer.example.com/trainer", Priority: &priority}}, "plain": nil,
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod, Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: "1s"}},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace, EvictionResponders: responders,
				Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}}}}
		if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		world.WaitPod(t, ns, pod, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	trainer, err := world.Client.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plainGone := world.PodSeen(t, ns, "plain", "evicted", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	runAgent(t, name, emu, "--eviction-requests")

	emu.SetMaintenanceEvent(gceemu.EventTerminate)
	request := func(intent lifecyclev1alpha1.EvictionRequestIntent) {
		t.Helper()
		testworld.WaitFor(t, world.Client.LifecycleV1alpha1().RESTClient(), "evictionrequests", ns, drain.RequestName(trainer), "the trainer's EvictionRequest with intent "+string(intent),
			func(r *lifecyclev1alpha1.EvictionRequest) bool {
				return r.Spec.Intent == intent && r.Spec.Requester == protocol.EvictionRequester && r.Spec.Target.Pod != nil && r.Spec.Target.Pod.UID == trainer.UID
			})
	}
	request(lifecyclev1alpha1.EvictionRequestIntentEviction)
	world.WaitEvent(t, name, protocol.EventEvictionRequested, ns+"/trainer", "checkpointer.example.com/trainer")
	plainGone()

	emu.SetMaintenanceEvent(gceemu.EventNone)
	request(lifecyclev1alpha1.EvictionRequestIntentWithdrawn)
	world.WaitEvent(t, name, protocol.EventEvictionWithdrawn, ns+"/trainer")
	if p, err := world.Client.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the trainer was stopped: %v", err)
	}
}
