package compute

import (
	"errors"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// What a call's error means, and what a VM's read says, as the Node
// protocol carries them between an agent and whoever makes its calls
// (protocol/relay.go): one mapping for the agent's own calls and the
// aggregator's.

// Outcome is how a call that returned err ended: "" when it went through,
// else protocol.ManualPermissionDenied, protocol.ManualRefused or
// protocol.ManualFailed.
func Outcome(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPermissionDenied):
		return protocol.ManualPermissionDenied
	case errors.Is(err, ErrRefused):
		return protocol.ManualRefused
	}
	return protocol.ManualFailed
}

// NotAtGroupScope: err says that a reservation group's maintenance cannot
// be asked for at the group's scope (the VM names no group; the group is
// not GROUPED, or has hosts in use the cluster did not drain; the reads
// or the call are refused), so the VM's own is asked for instead.
func NotAtGroupScope(err error) bool {
	return errors.Is(err, ErrNoReservationGroup) || errors.Is(err, ErrGroupNotCallable) || errors.Is(err, ErrPermissionDenied)
}

// Facts is s as the answer to the VM read id carries it.
func (s Scheduling) Facts(id string) protocol.VMFacts {
	return protocol.VMFacts{ID: id, Spot: s.Spot, PreemptionNotice: protocol.Duration(s.PreemptionNotice), End: s.End, EndCause: s.EndCause,
		MachineType: s.MachineType, ProvisioningModel: s.ProvisioningModel, Status: s.Status,
		Reservation: s.Consumption.Reservation, Block: s.Consumption.Block, SubBlock: s.Consumption.SubBlock,
		PhysicalBlock: s.Topology.Block, PhysicalSubblock: s.Topology.Subblock, PhysicalHost: s.Topology.Host, NodePool: s.NodePool}
}

// SchedulingOf is the Scheduling f carries (Facts' inverse).
func SchedulingOf(f protocol.VMFacts) Scheduling {
	return Scheduling{Spot: f.Spot, PreemptionNotice: time.Duration(f.PreemptionNotice), End: f.End, EndCause: f.EndCause,
		Consumption: Consumption{Reservation: f.Reservation, Block: f.Block, SubBlock: f.SubBlock},
		Topology:    PhysicalTopology{Block: f.PhysicalBlock, Subblock: f.PhysicalSubblock, Host: f.PhysicalHost},
		MachineType: f.MachineType, ProvisioningModel: f.ProvisioningModel, Status: f.Status, NodePool: f.NodePool}
}
