package fleet

// A reservation block under GROUPED maintenance whose maintenance is
// pending and which has spare hosts (no running VM on them) is maintained
// there first: reservationBlocks.performMaintenance with scope
// UNUSED_CAPACITY costs no workload anything, and leaves only the hosts
// in use for the group's maintenance.

import "time"

// ReservationBlock is what the decision reads of a reservation block:
// Compute Engine's counts of its hosts, and the group maintenance's
// window.
type ReservationBlock struct {
	// Name names the block (its resource name).
	Name string
	// Grouped: its maintenance is GROUPED (schedulingType); an
	// INDEPENDENT block has no group maintenance.
	Grouped bool
	// Pending and Ongoing count its hosts whose maintenance is pending or
	// under way; Count and InUse its hosts and those with a running VM
	// (count and inUseHostCount: inUseCount counts VMs).
	Pending, Ongoing, Count, InUse int
	// Window is the group maintenance's window start (zero: not given).
	Window time.Time
}

// UnusedCapacityFirst is the blocks whose unused capacity to maintain
// now: GROUPED, their group maintenance pending in a known window (each
// window is one cycle, asked for once), none under way, hosts with no
// running VM, and not already asked for this window (asked: block name ->
// the window it was asked for).
func UnusedCapacityFirst(blocks []ReservationBlock, asked map[string]time.Time) []ReservationBlock {
	var out []ReservationBlock
	for _, b := range blocks {
		if w, ok := asked[b.Name]; ok && w.Equal(b.Window) {
			continue
		}
		if b.Grouped && !b.Window.IsZero() && b.Pending > 0 && b.Ongoing == 0 && b.Count > b.InUse {
			out = append(out, b)
		}
	}
	return out
}
