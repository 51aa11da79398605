package agent

// The health of the node's devices (lifecycle.UnhealthyDevices): a watch of
// the node's ResourceSlices, and the health the kubelet reports of the
// devices allocated to the node's pods, kept on the Node as the condition
// protocol.ConditionDeviceUnhealthy (syncConditions), which a fault policy
// names as it names a detector's.

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	return lifecycle.DeviceCondition(lifecycle.UnhealthyDevices(a.resourceSlices(), a.opts.Pods.List())), true
}

// resourceSlices are the node's ResourceSlices as last seen.
func (a *Agent) resourceSlices() []*resourcev1.ResourceSlice {
	var out []*resourcev1.ResourceSlice
	for _, o := range a.devices.List() {
		if s, ok := o.(*resourcev1.ResourceSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// syncDeviceTaints keeps the node's DeviceTaintRules as st asks
// (lifecycle.DeviceTaintRules): created while a maintenance is under way,
// deleted once the node is back. The rules it last made are remembered; an
// agent that starts lists the cluster's rules once, for those of its node
// a previous run left. A failed call is tried again at the next step; the
// maintenance never waits for it. Nothing is written while the node is
// observed only, or before the node's ResourceSlices are listed; no call is
// made on a node none of whose pools could be tainted, nor on a cluster
// that serves no DeviceTaintRules (before Kubernetes 1.37, where they are
// off by default), which is said once.
func (a *Agent) syncDeviceTaints(ctx context.Context, st lifecycle.State) {
	if a.observing() || a.devices == nil || !a.devices.HasSynced() || a.noDeviceRules {
		return
	}
	resourceSlices := a.resourceSlices()
	if len(a.deviceRules) == 0 && len(lifecycle.TaintableDrivers(a.opts.NodeName, resourceSlices)) == 0 {
		return
	}
	want := map[string]*resourcev1.DeviceTaintRule{}
	for _, r := range lifecycle.DeviceTaintRules(a.opts.NodeName, st, resourceSlices) {
		want[r.Name] = r
	}
	rules := a.opts.Client.DeviceTaintRules()
	wctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	if a.deviceRules == nil {
		list, err := rules.List(wctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			a.noDeviceRules = true
			a.log.Info("the cluster serves no DeviceTaintRules (resource.k8s.io/v1): the node's devices are not tainted during maintenance", "err", err)
			return
		case err != nil:
			a.log.Warn("DeviceTaintRules not listed", "err", err)
			return
		}
		a.deviceRules = map[string]bool{}
		for _, r := range list.Items {
			if strings.HasPrefix(r.Name, lifecycle.DeviceTaintRulePrefix+a.opts.NodeName+".") {
				a.deviceRules[r.Name] = true
			}
		}
	}
	for name, r := range want {
		if a.deviceRules[name] {
			continue
		}
		if _, err := rules.Create(wctx, r, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			a.log.Warn("the node's devices not tainted", "rule", name, "err", err)
			continue
		}
		a.deviceRules[name] = true
		a.log.Info("the node's devices tainted", "rule", name)
	}
	for name := range a.deviceRules {
		if want[name] != nil {
			continue
		}
		if err := rules.Delete(wctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			a.log.Warn("the node's devices not untainted", "rule", name, "err", err)
			continue
		}
		delete(a.deviceRules, name)
		a.log.Info("the node's devices untainted", "rule", name)
	}
}
