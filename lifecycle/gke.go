package lifecycle

// GKE's own maintenance handler writes the same keys as the agent: where
// it is seen handling a node, a maintenance is left to it.

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// leaveToGKE: GKE's own maintenance handler is seen handling the node
// (Observation.GKEHandling), so the maintenance under way, or starting
// now, is left to it, unless the configuration says to ignore GKE's
// handler: two handlers would drain the same pods in different orders and
// call Compute Engine twice. The agent stops its drain, makes no call,
// does not cordon (a cordon it made stays its own to undo), and leaves
// the active-maintenance label and the taint to GKE's handler; it still
// counts the interruption, and the maintenance ends as any does.
func (d *Decision) leaveToGKE(cfg Config, before State, obs Observation) {
	handling := obs.GKEHandling
	if handling == "" && obs.GKEHostMaintenance && d.State.Reason == protocol.ReasonHostMaintenance {
		// GKE's handler drains host maintenance itself here, and writes
		// the very label and taint the agent writes: the agent, usually
		// first, would never see it, and both would drain.
		handling = "its kubelet is GKE's, 1.33 or later, whose own handler drains host maintenance, writing the same label and taint as this agent"
	}
	// A fault's repair is the project's own: GKE's handler never asks
	// for one.
	if cfg.IgnoreGKEHandler || handling == "" || !d.State.Active() || d.State.LeftToGKE || d.State.Reason == protocol.ReasonFault {
		return
	}
	d.State.LeftToGKE = true
	// A call this step was about to make is not made.
	d.Perform, d.State.Requested = false, before.Requested
	if d.Cordon {
		// Started in this very step: the agent never cordons it, so it
		// is not the agent's to uncordon either.
		d.Cordon, d.State.CordonedBefore = false, true
	}
	d.Events = append(d.Events, EventRecord{Reason: protocol.EventLeftToGKE,
		Message: fmt.Sprintf("GKE's maintenance handler is handling this node (%s), so the %s is left to it: the agent does not drain or cordon the node, does not call Compute Engine, and leaves GKE's label and taint; it counts the interruption (--gke-handler=defer)",
			handling, d.State.Reason)})
}

// GKEHandling says how n shows that GKE's own maintenance handler is
// handling it ("" when it does not), given the agent's state st on n: the
// active-maintenance label with a value the agent did not write (any value
// while it is idle; passthrough, as GKE's handler writes for a
// perform-maintenance label it acts on, while the agent drains), or
// written by GKE's handler whatever its value (its field manager owns
// it), or GKE's maintenance-window-started taint.
func GKEHandling(n *corev1.Node, st protocol.AgentState) string {
	if v, ok := n.Labels[protocol.LabelActiveMaintenance]; ok && protocol.OwnsLabel(n, protocol.FieldManagerGKE, protocol.LabelActiveMaintenance) {
		return "label " + protocol.LabelActiveMaintenance + "=" + v + ", written by GKE's handler (" + protocol.FieldManagerGKE + ")"
	}
	if v, ok := n.Labels[protocol.LabelActiveMaintenance]; ok {
		var ours string
		switch {
		case st.LeftToGKE: // the agent writes none
		case st.Phase == protocol.PhaseDraining:
			ours = protocol.ValueOngoing
		case st.Phase == protocol.PhaseTerminating:
			ours = protocol.ValueTerminating
		}
		if v != ours {
			return "label " + protocol.LabelActiveMaintenance + "=" + v
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == protocol.TaintMaintenanceWindowStarted {
			return "taint " + protocol.TaintMaintenanceWindowStarted
		}
	}
	return ""
}

// GKEHandles reports whether a node whose kubelet is kubeletVersion runs
// GKE's own maintenance handler: GKE's kubelet ("v1.31.5-gke.1000"), 1.31
// or later.
func GKEHandles(kubeletVersion string) bool { return gkeAtLeast(kubeletVersion, 31) }

// GKEHandlesHostMaintenance reports whether GKE's own handler drains host
// maintenance itself on a node whose kubelet is kubeletVersion: GKE's
// kubelet, 1.33 or later, which drains on TERMINATE_ON_HOST_MAINTENANCE
// and writes the active-maintenance label and the impending-termination
// taint, as the agent does.
func GKEHandlesHostMaintenance(kubeletVersion string) bool { return gkeAtLeast(kubeletVersion, 33) }

// gkeAtLeast: kubeletVersion is GKE's kubelet, 1.minor or later.
func gkeAtLeast(kubeletVersion string, minor int) bool {
	v, gke := strings.CutPrefix(kubeletVersion, "v")
	if !gke || !strings.Contains(v, "-gke.") {
		return false
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	got, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (major > 1 || major == 1 && got >= minor)
}

// GKEWritesEvents reports whether GKE's own handler writes the host
// maintenance Events of a node whose kubelet is kubeletVersion: GKE's
// kubelet, 1.35 or later (GKE's "Monitor maintenance events" page: "View
// Kubernetes events for host maintenance"), with the reasons
// protocol.GKEEventReasons and the source protocol.GKEEventSource.
func GKEWritesEvents(kubeletVersion string) bool { return gkeAtLeast(kubeletVersion, 35) }

// leaveEventsToGKE marks the step's Events that GKE's own handler writes
// about the node itself (obs.GKEWritesEvents): the agent's would repeat
// them. The agent's other Events, which GKE has no like of, are recorded
// with the agent's source (protocol.EventSourceAgent), which tells them
// apart from GKE's.
func (d *Decision) leaveEventsToGKE(obs Observation) {
	if !obs.GKEWritesEvents {
		return
	}
	for i := range d.Events {
		d.Events[i].GKEWrites = protocol.IsGKEEventReason(d.Events[i].Reason)
	}
}

// GKEReportsFaults reports whether GKE runs its own report-and-replace
// flow on n (protocol.LabelFaultBehavior): GKE's kubelet 1.32.3-gke.1057001
// or later, on a machine of the families GKE documents it for (A3 High,
// A3 Mega, A3 Ultra, A4, A4X; instance types a3-highgpu-8g,
// a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g, a4x-highgpu-4g and their
// like). GKE also requires the node to consume a reservation, which the
// Node does not show: a report GKE refuses for that ends in its Error
// status, and the repair is asked of Compute Engine after the cool-down
// only if the pool's policy says repairWith: compute.
func GKEReportsFaults(n *corev1.Node) bool {
	t := n.Labels[corev1.LabelInstanceTypeStable]
	family := strings.HasPrefix(t, "a3-highgpu-") || strings.HasPrefix(t, "a3-megagpu-") || strings.HasPrefix(t, "a3-ultragpu-") ||
		strings.HasPrefix(t, "a4-") || strings.HasPrefix(t, "a4x-")
	return family && gkeVersionAtLeast(n.Status.NodeInfo.KubeletVersion, 1, 32, 3, 1057001)
}

// gkeVersionAtLeast: kubeletVersion is GKE's kubelet ("v1.32.3-gke.1057001")
// at major.minor.patch-gke.build or later.
func gkeVersionAtLeast(kubeletVersion string, want ...int) bool {
	v, ok := strings.CutPrefix(kubeletVersion, "v")
	semver, build, gke := strings.Cut(v, "-gke.")
	if !ok || !gke {
		return false
	}
	parts := strings.SplitN(semver, ".", 3)
	build, _, _ = strings.Cut(build, "-")
	parts = append(parts, build)
	if len(parts) != len(want) {
		return false
	}
	for i, p := range parts {
		got, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if got != want[i] {
			return got > want[i]
		}
	}
	return true
}
