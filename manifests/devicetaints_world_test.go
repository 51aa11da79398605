package manifests_test

import (
	"context"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// agentDeviceTaintRules: where the cluster serves DeviceTaintRules, the
// agent of node rbac-gpu-a (its client as) may
// taint its own node's pool of a driver NoSchedule, and delete that rule;
// another node's pool, one device only, a rule named for another node, an
// effect that evicts, or another taint key are refused, and so is deleting
// another node's rule.
func agentDeviceTaintRules(t *testing.T, as kubernetes.Interface, denied func(string, error, string)) {
	t.Helper()
	if !world.Serves(t, "resource.k8s.io/v1", "devicetaintrules") {
		t.Logf("DeviceTaintRules not served on Kubernetes %s (on by default from 1.37): their fencing is not checked", testworld.KubernetesVersion)
		return
	}
	rule := func(name, pool string, change func(*resourcev1.DeviceTaintRule)) *resourcev1.DeviceTaintRule {
		driver := "gpu.example.com"
		r := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: lifecycle.DeviceTaintRulePrefix + name + "." + driver},
			Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &driver, Pool: &pool},
				Taint: resourcev1.DeviceTaint{Key: protocol.TaintImpendingTermination, Value: "host-maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
		change(r)
		return r
	}
	create := func(r *resourcev1.DeviceTaintRule) error {
		_, err := as.ResourceV1().DeviceTaintRules().Create(testworld.Ctx(t, 10*time.Second), r, metav1.CreateOptions{})
		return err
	}
	same := func(*resourcev1.DeviceTaintRule) {}
	own := rule("rbac-gpu-a", "rbac-gpu-a", same)
	if err := create(own); err != nil {
		t.Errorf("the agent could not taint its own node's devices: %v", err)
	}
	const says = "must select its own node's pool"
	denied("another node's pool", create(rule("rbac-gpu-a", "rbac-tpu-b", func(r *resourcev1.DeviceTaintRule) { r.Name += ".x" })), says)
	denied("a rule named for another node", create(rule("rbac-tpu-b", "rbac-tpu-b", same)), "only the DeviceTaintRules of its own Node")
	denied("one device", create(rule("rbac-gpu-a", "rbac-gpu-a", func(r *resourcev1.DeviceTaintRule) {
		d := "gpu-0"
		r.Name, r.Spec.DeviceSelector.Device = r.Name+"x", &d
	})), says)
	denied("an effect that evicts", create(rule("rbac-gpu-a", "rbac-gpu-a", func(r *resourcev1.DeviceTaintRule) {
		r.Name, r.Spec.Taint.Effect = r.Name+"x", resourcev1.DeviceTaintEffectNoExecute
	})), says)
	denied("another taint key", create(rule("rbac-gpu-a", "rbac-gpu-a", func(r *resourcev1.DeviceTaintRule) {
		r.Name, r.Spec.Taint.Key = r.Name+"x", "example.com/mine"
	})), says)
	other := rule("rbac-tpu-b", "rbac-tpu-b", same)
	if _, err := world.Client.ResourceV1().DeviceTaintRules().Create(testworld.Ctx(t, 10*time.Second), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{own.Name, other.Name} {
			_ = world.Client.ResourceV1().DeviceTaintRules().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	denied("deleting another node's rule", as.ResourceV1().DeviceTaintRules().Delete(testworld.Ctx(t, 10*time.Second), other.Name, metav1.DeleteOptions{}),
		"only the DeviceTaintRules of its own Node")
	if err := as.ResourceV1().DeviceTaintRules().Delete(testworld.Ctx(t, 10*time.Second), own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the agent could not untaint its own node's devices: %v", err)
	}
}
