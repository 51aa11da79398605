package lifecycle

// The health of the node's devices: what their drivers and the kubelet
// say of them, as one node condition a fault policy can name.

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// UnhealthyDevices lists the node's devices reported unhealthy, sorted:
//   - a device of the node's ResourceSlices (resource.k8s.io/v1) that its
//     driver taints NoSchedule or NoExecute ("driver/pool/device key=value:effect");
//     a taint of effect None is information only, and an effect this
//     version does not know is taken as None, as the API asks;
//   - a device allocated to a container whose health the kubelet reports
//     Unhealthy (status.containerStatuses[].allocatedResourcesStatus,
//     "namespace/pod resource device").
func UnhealthyDevices(resourceSlices []*resourcev1.ResourceSlice, pods []*corev1.Pod) []string {
	var out []string
	for _, s := range resourceSlices {
		for _, d := range s.Spec.Devices {
			for _, t := range d.Taints {
				if t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute {
					out = append(out, fmt.Sprintf("%s/%s/%s %s=%s:%s", s.Spec.Driver, s.Spec.Pool.Name, d.Name, t.Key, t.Value, t.Effect))
				}
			}
		}
	}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					if r.Health == corev1.ResourceHealthStatusUnhealthy {
						out = append(out, fmt.Sprintf("%s/%s %s %s", p.Namespace, p.Name, rs.Name, r.ResourceID))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DeviceCondition is the node condition protocol.ConditionDeviceUnhealthy
// for the devices UnhealthyDevices lists: True naming them (ten at most),
// False when there is none.
func DeviceCondition(unhealthy []string) corev1.NodeCondition {
	if len(unhealthy) == 0 {
		return corev1.NodeCondition{Type: protocol.ConditionDeviceUnhealthy, Status: corev1.ConditionFalse, Reason: "DevicesHealthy",
			Message: "No device of the node is reported unhealthy (its drivers' device taints, the kubelet's health of allocated devices)"}
	}
	named := unhealthy
	if len(named) > 10 {
		named = named[:10]
	}
	more := ""
	if len(unhealthy) > len(named) {
		more = fmt.Sprintf(" and %d more", len(unhealthy)-len(named))
	}
	return corev1.NodeCondition{Type: protocol.ConditionDeviceUnhealthy, Status: corev1.ConditionTrue, Reason: "DeviceUnhealthy",
		Message: fmt.Sprintf("%d device(s) reported unhealthy: %s%s", len(unhealthy), strings.Join(named, "; "), more)}
}

// DeviceTaintRulePrefix begins the name of every DeviceTaintRule a node's
// agent keeps: DeviceTaintRulePrefix + node + "." + driver.
const DeviceTaintRulePrefix = "maintenance-handler."

// TaintableDrivers are the drivers of the node's ResourceSlices whose pool
// is named after the node, sorted: those whose devices DeviceTaintRules
// taints.
func TaintableDrivers(node string, resourceSlices []*resourcev1.ResourceSlice) []string {
	var drivers []string
	for _, s := range resourceSlices {
		if s.Spec.Pool.Name == node && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			drivers = append(drivers, s.Spec.Driver)
		}
	}
	slices.Sort(drivers)
	return slices.Compact(drivers)
}

// DeviceTaintRules are the DeviceTaintRules (resource.k8s.io/v1) a node in
// state st keeps on its devices: while a maintenance is under way (from its
// drain's start until the node is back in service), one per driver of the
// node's ResourceSlices whose pool is named after the node (the DRA kubelet
// plugin's default for node-local devices), tainting every device of that
// pool NoSchedule with the node's own taint key and the maintenance's
// reason, so that no new claim is allocated on them; none otherwise. A
// pool named otherwise is not tainted: its name does not show that it is
// this node's alone.
func DeviceTaintRules(node string, st State, resourceSlices []*resourcev1.ResourceSlice) []*resourcev1.DeviceTaintRule {
	if !st.Active() {
		return nil
	}
	var out []*resourcev1.DeviceTaintRule
	for _, d := range TaintableDrivers(node, resourceSlices) {
		driver, pool := d, node
		out = append(out, &resourcev1.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{Name: DeviceTaintRulePrefix + node + "." + driver},
			Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: &driver, Pool: &pool},
				Taint:          resourcev1.DeviceTaint{Key: protocol.TaintImpendingTermination, Value: string(st.Reason), Effect: resourcev1.DeviceTaintEffectNoSchedule},
			},
		})
	}
	return out
}
