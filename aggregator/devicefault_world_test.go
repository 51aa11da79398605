package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestDeviceTaintedByItsDriverIsRepaired: the pool's fault policy names
// the agent's device health condition. A GPU its DRA driver taints
// NoExecute in the node's ResourceSlice turns the condition True on the
// node (the agent binary, under its shipped permissions), and the
// aggregator finds the node faulty and approves its repair, naming the
// condition.
func TestDeviceTaintedByItsDriverIsRepaired(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	fp := newFaultyPool(t, ctx, "dra", 1)
	node := fp.names[0]
	world.WaitNode(t, node, "its devices healthy", func(n *corev1.Node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == protocol.ConditionDeviceUnhealthy {
				return c.Status == corev1.ConditionFalse
			}
		}
		return false
	})
	world.Devices(t, node, "gpu.example.com", resourcev1.Device{Name: "gpu-0",
		Taints: []resourcev1.DeviceTaint{{Key: "gpu.example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}}})
	world.WaitEvent(t, node, protocol.EventFaultRepairApproved, "UNRECOVERABLE_GPU_ERROR", string(protocol.ConditionDeviceUnhealthy))
	world.WaitNode(t, node, "tainted faulty", func(n *corev1.Node) bool { return protocol.HasTaintKey(n, protocol.TaintFaulty) })
}
