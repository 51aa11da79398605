package lifecycle

// The health of the node's devices: what their drivers and the kubelet
// say of them, as one node condition a fault policy can name.

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

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
