package agent

// The health of the node's devices (lifecycle.UnhealthyDevices): a watch of
// the node's ResourceSlices, and the health the kubelet reports of the
// devices allocated to the node's pods, kept on the Node as the condition
// protocol.ConditionDeviceUnhealthy (syncConditions), which a fault policy
// names as it names a detector's.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
)

// watchDevices starts the watch of the node's ResourceSlices. The agent's
// health does not depend on it: a cluster that serves no
// resource.k8s.io/v1 (before Kubernetes 1.34), or an agent not allowed to
// read ResourceSlices, leaves the condition unwritten, and the watch keeps
// retrying.
func (a *Agent) watchDevices(ctx context.Context) {
	a.devices = kube.NewInformer(a.opts.Client.ResourceSliceListWatch(a.opts.NodeName),
		kube.InformerOptions{Name: "resourceslices", Logger: a.log.With("watch", "resourceslices"), Clock: a.opts.Clock})
	a.devices.AddHandlers(kube.OnAnyChange(a.poke))
	go a.devices.Run(ctx)
}

// deviceCondition is the device health condition to keep on the Node, once
// the node's ResourceSlices are listed (false before).
func (a *Agent) deviceCondition() (corev1.NodeCondition, bool) {
	if a.devices == nil || !a.devices.HasSynced() {
		return corev1.NodeCondition{}, false
	}
	var resourceSlices []*resourcev1.ResourceSlice
	for _, o := range a.devices.List() {
		if s, ok := o.(*resourcev1.ResourceSlice); ok {
			resourceSlices = append(resourceSlices, s)
		}
	}
	return lifecycle.DeviceCondition(lifecycle.UnhealthyDevices(resourceSlices, a.opts.Pods.List())), true
}
