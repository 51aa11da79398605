package protocol

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// The node lifecycle conditions the agent keeps on its own Node, of the
// types Kubernetes' node lifecycle conditions enhancement (KEP-5683)
// reserves: controllers and other node agents read maintenance from them.
// Each is True or False, never absent once the agent has run: a False
// condition says since when the node has not been in that state.
//
// They are k8s.io/api's own constants (core/v1, from v0.37), by the names
// this package reads them as.
const (
	// ConditionMaintenancePlanned: a maintenance is pending (the notice,
	// with its window).
	ConditionMaintenancePlanned = corev1.NodeMaintenancePlanned
	// ConditionMaintenanceInProgress: from the drain's start until the
	// node is back in service.
	ConditionMaintenanceInProgress = corev1.NodeMaintenanceInProgress
	// ConditionDrainInProgress: the drain runs.
	ConditionDrainInProgress = corev1.NodeDrainInProgress
	// ConditionDrained: the drain is over and every pod it stops is gone.
	ConditionDrained = corev1.NodeDrained
)

// ConditionDeviceUnhealthy is the agent's fault signal of the node's
// devices (lifecycle.DeviceCondition): True while a device's driver taints
// it NoSchedule or NoExecute in the node's ResourceSlices, or the kubelet
// reports a device allocated to a pod Unhealthy. It is no lifecycle
// condition: a fault policy names it as it names a detector's.
const ConditionDeviceUnhealthy corev1.NodeConditionType = "maintenance-handler.io/DeviceUnhealthy"

// AgentConditionTypes are every condition the agent writes on its Node:
// the lifecycle conditions and ConditionDeviceUnhealthy (an uninstall
// removes them).
var AgentConditionTypes = append(slices.Clone(NodeConditionTypes), ConditionDeviceUnhealthy)

// NodeConditionTypes lists them, in the order NodeConditions gives them.
var NodeConditionTypes = []corev1.NodeConditionType{ConditionMaintenancePlanned, ConditionMaintenanceInProgress, ConditionDrainInProgress, ConditionDrained}
