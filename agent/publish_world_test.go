package agent_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestIdlenessPublished: the agent writes since when its node is idle,
// keeps it across a restart, and says why it is busy.
func TestIdlenessPublished(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-idle-pub-0")
	ns := world.Namespace(t)
	r := startAgent(t, v, lifecycle.DefaultConfig)
	n := world.WaitNode(t, v.name, "idle since", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })
	since := n.Annotations[protocol.AnnotationIdleSince]

	trainer := makePod(ns, "trainer", v.name, 1, time.Second)
	trainer.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	createPod(t, trainer)
	world.WaitNode(t, v.name, "busy with accelerators", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationIdleSince] == "" && n.Annotations[protocol.AnnotationBusy] == protocol.BusyAccelerators
	})
	zero := int64(0)
	if err := world.Client.CoreV1().Pods(ns).Delete(testworld.Ctx(t, 10*time.Second), "trainer", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	n = world.WaitNode(t, v.name, "idle again", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })
	again := n.Annotations[protocol.AnnotationIdleSince]
	if again == since {
		t.Errorf("idle since %s did not move after a busy spell", again)
	}

	r.stop()
	startAgent(t, v, lifecycle.DefaultConfig)
	// A notice the new agent mirrors: it has reconciled the Node.
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 20, 2, 0, 0, 0, time.UTC), time.Hour))
	world.WaitNode(t, v.name, "restarted agent at work", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	if got := getNode(t, v.name).Annotations[protocol.AnnotationIdleSince]; got != again {
		t.Errorf("the restarted agent moved idle-since from %s to %s", again, got)
	}
	pinned := makePod(ns, "pinned", v.name, 1, time.Second)
	pinned.Annotations[protocol.PodAnnotationSafeToEvict] = "false"
	createPod(t, pinned)
	world.WaitNode(t, v.name, "busy: safe-to-evict", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationIdleSince] == "" && n.Annotations[protocol.AnnotationBusy] == protocol.BusySafeToEvict
	})
}

// TestIdlenessThroughResourceClaims: a trainer that holds its GPUs through
// a ResourceClaim (dynamic resource allocation), requesting no
// nvidia.com/gpu, keeps its node busy; one whose claim asks for another
// class of device does not.
func TestIdlenessThroughResourceClaims(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	v := newVM(t, "agent-idle-dra-0")
	ns := world.Namespace(t)
	startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "idle since", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationIdleSince] != "" })
	claim := func(name, class string) {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "devices", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}}}}}
		if _, err := world.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claimed := func(pod, claim string) {
		p := makePod(ns, pod, v.name, 1, time.Second)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: &claim}}
		createPod(t, p)
	}
	claim("nic", "rdma.example.com")
	claimed("web", "nic")
	claim("trainer-gpus", "gpu.nvidia.com")
	claimed("trainer", "trainer-gpus")
	world.WaitNode(t, v.name, "busy with the claimed GPUs", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationIdleSince] == "" && n.Annotations[protocol.AnnotationBusy] == protocol.BusyAccelerators
	})
	zero := int64(0)
	if err := world.Client.CoreV1().Pods(ns).Delete(ctx, "trainer", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, v.name, "idle, the web pod's claim for another class left", func(n *corev1.Node) bool {
		return n.Annotations[protocol.AnnotationIdleSince] != "" && n.Annotations[protocol.AnnotationBusy] == ""
	})
}
