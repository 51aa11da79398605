package lifecycle

// A forced maintenance of one host moves the other hosts of its slice or
// gang only on what that host cannot write. Its agent's state (the
// reason, the start, the deadline on its Node) is its own word: a node
// that holds its agent's token could say it is preempted whenever it
// liked, and have every host of its slice tainted, cordoned and drained
// by force. So the aggregator reads the VM itself from Compute Engine
// (instances.get), and only a cause the read bears out (ConfirmsCause) is
// a cause (SliceHost.Confirmed). The price is time: the other hosts begin
// to drain once the aggregator has read the VM, a few seconds after the
// host itself, and, for a Spot VM with a preemption notice, from the
// moment Compute Engine begins to stop it rather than from the notice.

import (
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// VMNow is what the aggregator read of a host's VM with instances.get to
// confirm its forced maintenance (the Compute Engine v1 API description's
// Instance: status, lastStartTimestamp, resourceStatus.upcomingMaintenance
// and resourceStatus.scheduling.terminationTimestamp).
type VMNow struct {
	// Gone: instances.get answered 404 for the VM the Node names (its
	// providerID, checked to carry the Node's name in the aggregator's
	// project and regions): the VM was deleted, as a Spot VM whose
	// termination action is DELETE is on preemption.
	Gone bool
	// Status is the instance's status (RUNNING, STOPPING, TERMINATED...).
	Status string
	// LastStart is its lastStartTimestamp: when the VM last started (zero
	// when not given). A host confirms one forced maintenance per start.
	LastStart time.Time
	// MaintenanceStatus and MaintenanceStart are its upcoming
	// maintenance's maintenanceStatus (PENDING, ONGOING) and
	// windowStartTime ("" and zero when none is scheduled).
	MaintenanceStatus string
	MaintenanceStart  time.Time
	// End is its terminationTimestamp: when Compute Engine ends it for its
	// time limit (zero: none).
	End time.Time
}

// stoppingStatuses are the instance statuses of a VM that is stopping,
// stopped or being repaired (the Compute Engine v1 API description's
// Instance.status: PENDING_STOP "gracefully shutting down", STOPPING
// "currently stopping (either being deleted or killed)", TERMINATED "has
// stopped (either by explicit action or underlying failure)", ...): its
// host no longer runs its share of the slice's job.
var stoppingStatuses = map[string]bool{"PENDING_STOP": true, "STOPPING": true, "STOPPED": true, "TERMINATED": true,
	"SUSPENDING": true, "SUSPENDED": true, "REPAIRING": true, "DEPROVISIONING": true}

// ImminentMaintenance is how far ahead of now a host maintenance's window
// may start and still confirm a host maintenance under way: the hour's
// notice a GPU VM's maintenance-event key gives before Compute Engine
// stops it for maintenance (Google's "Get live migration notices" page,
// https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice,
// as GKE's handle-disruption-gpu-tpu page tells it), and five minutes for
// clocks and the read.
const ImminentMaintenance = time.Hour + 5*time.Minute

// ConfirmsCause says whether what the aggregator read of a host's VM
// (vm, at now) bears out the forced maintenance its agent says is under
// way (reason), and why not when it does not. A VM that is stopping, or
// gone, bears out every forced reason: its host is down, whatever the
// cause. Else a host maintenance needs its VM's upcoming maintenance
// ONGOING or its window starting within ImminentMaintenance, and a known
// end the VM's end within knownEndLead of now. A preemption needs its VM
// stopping: Compute Engine reports nothing of a preemption before it
// begins to stop the VM. A repair is confirmed by the relay's accepted
// report of it in the VM's present boot (reported: Compute Engine stops
// the VM once the report's operation is done), or by its VM stopping; an
// approval alone is none (its node may never ask). A manual maintenance
// is no forced one (causes reads who asked for it).
func ConfirmsCause(reason protocol.Reason, vm VMNow, reported bool, knownEndLead time.Duration, now time.Time) (bool, string) {
	if vm.Gone || stoppingStatuses[vm.Status] || reason == protocol.ReasonFault && reported {
		return true, ""
	}
	running := fmt.Sprintf("its VM is %s", vm.Status)
	switch reason {
	case protocol.ReasonHostMaintenance:
		switch {
		case vm.MaintenanceStatus == "ONGOING":
			return true, ""
		case vm.MaintenanceStart.IsZero():
			return false, running + " with no maintenance scheduled"
		case vm.MaintenanceStart.After(now.Add(ImminentMaintenance)):
			return false, fmt.Sprintf("%s, its maintenance window starts at %s, more than %s ahead", running, vm.MaintenanceStart.UTC().Format(time.RFC3339), ImminentMaintenance)
		}
		return true, ""
	case protocol.ReasonKnownEnd:
		switch {
		case vm.End.IsZero():
			return false, running + " with no known end"
		case vm.End.After(now.Add(knownEndLead)):
			return false, fmt.Sprintf("%s, and ends at %s, more than %s ahead", running, vm.End.UTC().Format(time.RFC3339), knownEndLead)
		}
		return true, ""
	case protocol.ReasonFault:
		return false, running + ", and the relay has made no report of its repair"
	}
	return false, running + ", not stopping"
}
