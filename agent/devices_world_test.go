package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// deviceHealth is the node's device health condition, when there is one.
func deviceHealth(n *corev1.Node) (corev1.NodeCondition, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == protocol.ConditionDeviceUnhealthy {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// TestDeviceHealthOnTheNode: the agent, under its shipped permissions,
// keeps the condition maintenance-handler.io/DeviceUnhealthy on its Node
// from its node's ResourceSlices: False while every device is healthy,
// True naming the device its driver taints NoExecute, False again once the
// taint is gone.
func TestDeviceHealthOnTheNode(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-devices-0")
	ctx := testworld.Ctx(t, 3*time.Minute)
	slice := world.Devices(t, v.name, "gpu.example.com", resourcev1.Device{Name: "gpu-0"}, resourcev1.Device{Name: "gpu-1"})
	slices := world.Client.ResourceV1().ResourceSlices()
	startAgent(t, v, lifecycle.DefaultConfig)
	healthy := func(n *corev1.Node) bool { c, ok := deviceHealth(n); return ok && c.Status == corev1.ConditionFalse }
	world.WaitNode(t, v.name, "its devices healthy", healthy)

	taint := func(taints []resourcev1.DeviceTaint) {
		t.Helper()
		s, err := slices.Get(ctx, slice, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Devices[1].Taints = taints
		s, err = slices.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(taints) > 0 && len(s.Spec.Devices[1].Taints) == 0 {
			t.Skipf("device taints not kept on Kubernetes %s (on by default from 1.36)", testworld.KubernetesVersion)
		}
	}
	taint([]resourcev1.DeviceTaint{{Key: "gpu.example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}})
	world.WaitNode(t, v.name, "gpu-1 unhealthy", func(n *corev1.Node) bool {
		c, ok := deviceHealth(n)
		return ok && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "gpu.example.com/"+v.name+"/gpu-1 gpu.example.com/xid=79:NoExecute")
	})
	taint(nil)
	world.WaitNode(t, v.name, "its devices healthy again", healthy)
}

// TestDevicesTaintedWhileInMaintenance: a node whose DRA driver publishes
// a pool named after the node. When a host maintenance drains the node,
// its agent, under its shipped permissions, taints every device of that
// pool NoSchedule with a DeviceTaintRule, so that no new claim lands on
// them; when the node is back in service (its agent restarted with the
// VM), the rule is gone.
func TestDevicesTaintedWhileInMaintenance(t *testing.T) {
	testworld.Need(t)
	if !world.Serves(t, "resource.k8s.io/v1", "devicetaintrules") {
		t.Skipf("DeviceTaintRules not served on Kubernetes %s (on by default from 1.37)", testworld.KubernetesVersion)
	}
	v := newVM(t, "agent-devtaint-0")
	ctx := testworld.Ctx(t, 3*time.Minute)
	world.Devices(t, v.name, "gpu.example.com", resourcev1.Device{Name: "gpu-0"}, resourcev1.Device{Name: "gpu-1"})
	r := startAgent(t, v, lifecycle.DefaultConfig)
	world.WaitNode(t, v.name, "its devices healthy", func(n *corev1.Node) bool { _, ok := deviceHealth(n); return ok })

	v.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	name := lifecycle.DeviceTaintRulePrefix + v.name + ".gpu.example.com"
	rules := world.Client.ResourceV1().RESTClient()
	rule := testworld.WaitFor(t, rules, "devicetaintrules", "", name, "the node's devices tainted", func(*resourcev1.DeviceTaintRule) bool { return true })
	sel, taint := rule.Spec.DeviceSelector, rule.Spec.Taint
	if sel == nil || sel.Driver == nil || *sel.Driver != "gpu.example.com" || sel.Pool == nil || *sel.Pool != v.name || sel.Device != nil ||
		taint.Key != protocol.TaintImpendingTermination || taint.Effect != resourcev1.DeviceTaintEffectNoSchedule || taint.Value != string(protocol.ReasonHostMaintenance) {
		t.Errorf("DeviceTaintRule selector %+v, taint %+v; want every device of the node's pool, NoSchedule for the host maintenance", sel, taint)
	}

	gone := make(chan error, 1)
	lw := cache.NewListWatchFromClient(rules, "devicetaintrules", "", fields.OneTermEqualSelector("metadata.name", name))
	wctx, cancel := context.WithTimeout(ctx, testworld.WaitTimeout)
	defer cancel()
	go func() {
		_, err := watchtools.UntilWithSync(wctx, lw, &resourcev1.DeviceTaintRule{}, func(s cache.Store) (bool, error) { return len(s.List()) == 0, nil }, func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
		gone <- err
	}()
	reboot(t, v, r)
	world.WaitNode(t, v.name, "back in service", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationPhase] == "" })
	if err := <-gone; err != nil {
		t.Fatalf("the DeviceTaintRule of a node back in service: %v", err)
	}
}
