package lifecycle

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestUnhealthyDevices: a device its driver taints NoSchedule or NoExecute,
// and a device the kubelet reports Unhealthy for a pod, are unhealthy; a
// taint of effect None, one of an effect not known, and Healthy or Unknown
// devices are not.
func TestUnhealthyDevices(t *testing.T) {
	slice := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.example.com", Pool: resourcev1.ResourcePool{Name: "node-0"},
		Devices: []resourcev1.Device{
			{Name: "gpu-0"},
			{Name: "gpu-1", Taints: []resourcev1.DeviceTaint{{Key: "gpu.example.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}}},
			{Name: "gpu-2", Taints: []resourcev1.DeviceTaint{{Key: "gpu.example.com/ecc", Effect: resourcev1.DeviceTaintEffectNoSchedule}}},
			{Name: "gpu-3", Taints: []resourcev1.DeviceTaint{{Key: "note", Effect: resourcev1.DeviceTaintEffectNone}, {Key: "later", Effect: "NoExecuteWithPodDisruptionBudget"}}},
		}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: "main", AllocatedResourcesStatus: []corev1.ResourceStatus{{Name: "nvidia.com/gpu", Resources: []corev1.ResourceHealth{
			{ResourceID: "GPU-aaa", Health: corev1.ResourceHealthStatusHealthy},
			{ResourceID: "GPU-bbb", Health: corev1.ResourceHealthStatusUnhealthy},
			{ResourceID: "GPU-ccc", Health: corev1.ResourceHealthStatusUnknown},
		}}}}}}}
	got := UnhealthyDevices([]*resourcev1.ResourceSlice{slice}, []*corev1.Pod{pod})
	want := []string{"gpu.example.com/node-0/gpu-1 gpu.example.com/xid=79:NoExecute", "gpu.example.com/node-0/gpu-2 gpu.example.com/ecc=:NoSchedule", "ml/trainer nvidia.com/gpu GPU-bbb"}
	if !slices.Equal(got, want) {
		t.Errorf("UnhealthyDevices = %q, want %q", got, want)
	}
	c := DeviceCondition(got)
	if c.Type != protocol.ConditionDeviceUnhealthy || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "3 device(s)") || !strings.Contains(c.Message, "GPU-bbb") {
		t.Errorf("DeviceCondition = %+v, want True naming the three", c)
	}
	if c := DeviceCondition(nil); c.Status != corev1.ConditionFalse || c.Reason != "DevicesHealthy" {
		t.Errorf("DeviceCondition(none) = %+v, want False", c)
	}
	many := make([]string, 12)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	if c := DeviceCondition(many); !strings.Contains(c.Message, "12 device(s)") || !strings.Contains(c.Message, "and 2 more") {
		t.Errorf("DeviceCondition(12) = %q, want ten named and two more", c.Message)
	}
}

// TestDeviceTaintRules: while a maintenance is under way, one rule per
// driver whose pool is named after the node, every device of the pool
// tainted NoSchedule with the node's taint key and the reason; none for a
// pool named otherwise or another node's, and none in service.
func TestDeviceTaintRules(t *testing.T) {
	node, other := "gpu-0", "gpu-1"
	pool := func(driver, name string, on *string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: name}, NodeName: on}}
	}
	own := []*resourcev1.ResourceSlice{pool("gpu.example.com", node, &node), pool("gpu.example.com", node, &node), pool("nic.example.com", node, &node),
		pool("fpga.example.com", "shared", &node), pool("tpu.example.com", node, &other)}
	draining := State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance}
	rules := DeviceTaintRules(node, draining, own)
	var got []string
	for _, r := range rules {
		sel, taint := r.Spec.DeviceSelector, r.Spec.Taint
		if *sel.Pool != node || sel.Device != nil || taint.Key != protocol.TaintImpendingTermination || taint.Value != "host-maintenance" || taint.Effect != resourcev1.DeviceTaintEffectNoSchedule {
			t.Errorf("rule %s: selector %+v, taint %+v", r.Name, sel, taint)
		}
		got = append(got, r.Name+" "+*sel.Driver)
	}
	want := []string{"maintenance-handler.gpu-0.gpu.example.com gpu.example.com", "maintenance-handler.gpu-0.nic.example.com nic.example.com"}
	if !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
	if r := DeviceTaintRules(node, State{Phase: protocol.PhaseIdle}, own); len(r) != 0 {
		t.Errorf("in service: %d rules, want none", len(r))
	}
}
