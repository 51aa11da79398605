package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// faultCondition is the node condition the demo's GPU health check writes,
// and faultHold how long it must hold before the node counts as faulty.
const (
	faultCondition = "GPUUnhealthy"
	faultHold      = 5 * time.Second
)

// demoPolicy is the policy ConfigMap's policy.yaml: a GPU whose health
// check says unhealthy for faultHold is repaired.
var demoPolicy = fmt.Sprintf(`cluster:
  faults:
    conditions:
    - type: %s
      for: %s
      behavior: %s
    drainTimeout: 5m
`, faultCondition, faultHold, protocol.BehaviorUnrecoverableGPUError)

// createPolicy writes the policy ConfigMap the aggregators read.
func (d *demo) createPolicy(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: policyConfigMap, Namespace: metav1.NamespaceSystem},
		Data: map[string]string{policy.ConfigKey: demoPolicy}}
	_, err := d.world.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, cm, metav1.CreateOptions{})
	return err
}

// setGPUHealth writes the health check's condition on name: unhealthy or
// not.
func (d *demo) setGPUHealth(ctx context.Context, name string, unhealthy bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := d.world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == faultCondition })
		if unhealthy {
			now := metav1.Now()
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: faultCondition, Status: corev1.ConditionTrue,
				Reason: "XID79", Message: "GPU 3 has fallen off the bus", LastTransitionTime: now, LastHeartbeatTime: now})
		}
		_, err = d.world.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// faultScenario: a GPU fails; its node is drained, its host reported to
// Compute Engine, and it is back in service once the VM returns.
func (d *demo) faultScenario(ctx context.Context) error {
	v := d.vms[2]
	d.say("== 7. A GPU of %s falls off the bus: its health check sets the node condition %s=True", v.Name, faultCondition)
	d.say("   held %s, the aggregator finds the node faulty and taints it; its agent drains it in order (the trainer gets its %d s),", faultHold, d.grace)
	d.say("   then reports the host to Compute Engine (instances.reportHostAsFaulty), once")
	if err := d.setGPUHealth(ctx, v.Name, true); err != nil {
		return err
	}
	if err := d.waitNode(ctx, v, 5*time.Minute, active(protocol.ValueTerminating)); err != nil {
		return err
	}
	for _, c := range v.Emu.Calls() {
		d.say("   Compute Engine received: POST projects/%s/zones/%s/instances/%s/%s?requestId=%s {%s, %q} -> %d",
			c.Project, c.Zone, c.Instance, c.Method, c.RequestID, c.Behavior, c.Description, c.Status)
	}
	// The VM comes back on a repaired host, its GPUs healthy.
	if err := d.setGPUHealth(ctx, v.Name, false); err != nil {
		return err
	}
	if err := d.reboot(ctx, v, false); err != nil {
		return err
	}
	if err := d.waitNode(ctx, v, time.Minute, func(n *corev1.Node) bool { return !protocol.HasTaintKey(n, protocol.TaintFaulty) }); err != nil {
		return err
	}
	d.say("   %s is back on a repaired host, in service", v.Name)
	return nil
}
