package compute

// A reservation's block or sub-block under GROUPED maintenance is
// maintained as one unit: once every node of the group is drained, one
// call starts the group's maintenance, at its scope
// (reservationSubBlocks.performMaintenance, or
// reservationBlocks.performMaintenance with a maintenanceScope). The VM
// names the reservation, block and sub-block it consumes in its own
// instances.get, each in a field of its own
// (resourceStatus.reservationConsumptionInfo: consumedReservation,
// consumedReservationBlock, consumedReservationSubBlock).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// The IAM permissions of the reservation methods.
const (
	SubBlockPermission = "compute.reservationSubBlocks.performMaintenance"
	BlockPermission    = "compute.reservationBlocks.performMaintenance"
)

// The scopes of a block's maintenance (maintenanceScope).
const (
	ScopeAll            = "ALL"
	ScopeRunningVMs     = "RUNNING_VMS"
	ScopeUnusedCapacity = "UNUSED_CAPACITY"
)

// ErrNoReservationGroup: the VM does not say which reservation block or
// sub-block it runs in.
var ErrNoReservationGroup = errors.New("the VM names no reservation block or sub-block it consumes")

// ReservationGroup names a reservation's block, and sub-block when
// SubBlock is set.
type ReservationGroup struct {
	Project, Zone, Reservation, Block, SubBlock string
}

func (g ReservationGroup) String() string {
	s := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", g.Project, g.Zone, g.Reservation)
	if g.Block != "" {
		s += "/reservationBlocks/" + g.Block
	}
	if g.SubBlock != "" {
		s += "/reservationSubBlocks/" + g.SubBlock
	}
	return s
}

// reservationPath is the path of g's reservation.
func (g ReservationGroup) reservationPath() string {
	return "projects/" + url.PathEscape(g.Project) + "/zones/" + url.PathEscape(g.Zone) + "/reservations/" + url.PathEscape(g.Reservation)
}

func (g ReservationGroup) path() string {
	p := g.reservationPath() + "/reservationBlocks/" + url.PathEscape(g.Block)
	if g.SubBlock != "" {
		p += "/reservationSubBlocks/" + url.PathEscape(g.SubBlock)
	}
	return p
}

// Group is the reservation block, and sub-block where the VM names one,
// that c names, in inst's project and zone unless the names say others:
// false when it names no block. Sub-block IDs are unique only within their
// block, so a group is named by its reservation, block and sub-block.
func (c Consumption) Group(inst Instance) (ReservationGroup, bool) {
	g := ReservationGroup{Project: inst.Project, Zone: inst.Zone}
	for _, name := range []string{c.Reservation, c.Block, c.SubBlock} {
		parts := strings.Split(strings.Trim(name, "/"), "/")
		for i := 0; i+1 < len(parts); i++ {
			switch v := parts[i+1]; parts[i] {
			case "projects":
				g.Project = v
			case "zones":
				g.Zone = v
			case "reservations":
				g.Reservation = v
			case "reservationBlocks":
				g.Block = v
			case "reservationSubBlocks":
				g.SubBlock = v
			}
		}
	}
	return g, g.Reservation != "" && g.Block != ""
}

// PerformGroupMaintenance starts the maintenance of g now: its sub-block
// when g names one, else its block with scope. It retries transient
// failures until ctx ends, with requestID on every attempt, and returns
// the operation's name (a zonal operation, as WaitOperation follows).
func (m *Maintainer) PerformGroupMaintenance(ctx context.Context, g ReservationGroup, scope, requestID string) (string, error) {
	return m.performGroup(ctx, g, scope, requestID, "")
}

func (m *Maintainer) performGroup(ctx context.Context, g ReservationGroup, scope, requestID, account string) (string, error) {
	if g.SubBlock != "" {
		return m.postTo(ctx, g.path(), g.String(), "performMaintenance", SubBlockPermission, requestID, account, nil)
	}
	body := map[string]string{"maintenanceScope": scope}
	return m.postTo(ctx, g.path(), g.String(), "performMaintenance", BlockPermission, requestID, account, body)
}

// ErrGroupNotCallable: the group the VM runs in is not one whose
// maintenance this cluster may start at its scope: it is not GROUPED, or
// it has hosts in use that the cluster did not drain.
var ErrGroupNotCallable = errors.New("the reservation group's maintenance is not asked for at its scope")

// PerformGroupMaintenance starts the maintenance of the reservation group
// the VM runs in, once: its sub-block (subBlock) or its block (with scope
// RUNNING_VMS: hosts with no VM are the aggregator's, with
// UNUSED_CAPACITY). It reads which group with instances.get, and the
// group's own state with reservationBlocks.list or
// reservationSubBlocks.list, and calls only where the group is GROUPED and
// its hosts in use (inUseHostCount) are the members the cluster drained
// (members): else ErrGroupNotCallable, saying why, and nothing is called
// (a group call would reach VMs the cluster never drained, of a shared
// reservation or another pool; an INDEPENDENT group has no group
// maintenance).
func (v *VM) PerformGroupMaintenance(ctx context.Context, requestID string, subBlock bool, members int) (string, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return "", err
	}
	sc, err := v.Maintainer.scheduling(ctx, inst, account)
	if err != nil {
		return "", err
	}
	g, ok := sc.Consumption.Group(inst)
	if !ok || subBlock && g.SubBlock == "" {
		return "", fmt.Errorf("%s (reservationConsumptionInfo %+v): %w", inst, sc.Consumption, ErrNoReservationGroup)
	}
	if !subBlock {
		g.SubBlock = ""
	}
	st, err := v.Maintainer.groupState(ctx, g, account)
	if err != nil {
		return "", err
	}
	switch {
	case st.SchedulingType != "GROUPED":
		return "", fmt.Errorf("%s is scheduled %q, not GROUPED: its hosts have no group maintenance: %w", g, st.SchedulingType, ErrGroupNotCallable)
	case st.InUseHosts != members:
		return "", fmt.Errorf("%s has %d hosts in use and the cluster drained %d nodes of it: a call at its scope would stop VMs the cluster never drained: %w",
			g, st.InUseHosts, members, ErrGroupNotCallable)
	}
	return v.Maintainer.performGroup(ctx, g, ScopeRunningVMs, requestID, account)
}

// groupState reads g's own state, from the list of the reservation's
// blocks or of its block's sub-blocks.
func (m *Maintainer) groupState(ctx context.Context, g ReservationGroup, account string) (GroupState, error) {
	parent := g
	parent.SubBlock, parent.Block = "", ""
	path, permission, what, name := parent.reservationPath()+"/reservationBlocks", BlockListPermission, "reservationBlocks", g.Block
	if g.SubBlock != "" {
		parent.Block = g.Block
		path, permission, what, name = parent.path()+"/reservationSubBlocks", SubBlockListPermission, "reservationSubBlocks", g.SubBlock
	}
	var list struct {
		Items []groupJSON `json:"items"`
	}
	if err := m.get(ctx, path, permission, account, &list); err != nil {
		return GroupState{}, fmt.Errorf("%s.list on %s: %w", what, parent, err)
	}
	for _, item := range list.Items {
		if item.Name == name {
			return item.state(g, ""), nil
		}
	}
	return GroupState{}, fmt.Errorf("%s.list on %s names no %s: %w", what, parent, name, ErrNoReservationGroup)
}

// The IAM permissions reading a reservation's blocks and sub-blocks
// needs.
const (
	BlockListPermission    = "compute.reservationBlocks.list"
	SubBlockListPermission = "compute.reservationSubBlocks.list"
)

// Reservation names a reservation.
type Reservation struct {
	Project, Zone, Name string
}

// ParseReservation reads projects/P/zones/Z/reservations/R.
func ParseReservation(s string) (Reservation, error) {
	p := strings.Split(strings.Trim(s, "/"), "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "zones" || p[4] != "reservations" || p[1] == "" || p[3] == "" || p[5] == "" {
		return Reservation{}, fmt.Errorf("reservation %q: want projects/PROJECT/zones/ZONE/reservations/NAME", s)
	}
	return Reservation{Project: p[1], Zone: p[3], Name: p[5]}, nil
}

func (r Reservation) String() string {
	return fmt.Sprintf("projects/%s/zones/%s/reservations/%s", r.Project, r.Zone, r.Name)
}

// GroupState is what Compute Engine says of one block or sub-block of a
// reservation: its maintenance (GroupMaintenanceInfo) and its health.
type GroupState struct {
	Group ReservationGroup
	// Topology is its physical topology's ID (physicalTopology.block, or
	// .subBlock): what GKE's topology label on its nodes says; and
	// BlockTopology its block's (physicalTopology.block), for a sub-block,
	// whose ID is unique only within its block.
	Topology, BlockTopology string
	// SchedulingType is GROUPED or INDEPENDENT.
	SchedulingType string
	// Pending and Ongoing count the hosts whose maintenance is pending or
	// under way (maintenancePendingCount, maintenanceOngoingCount).
	Pending, Ongoing int
	// Window is the upcoming group maintenance's window start (zero when
	// none, or not given).
	Window time.Time
	// Health is healthInfo.healthStatus: HEALTHY or DEGRADED ("" when not
	// given).
	Health string
	// Count and InUseHosts are its hosts and those with a running VM
	// (count, inUseHostCount), InUse its running VMs (inUseCount).
	Count, InUse, InUseHosts int
}

// groupJSON is a reservationBlocks or reservationSubBlocks list item.
type groupJSON struct {
	Name             string `json:"name"`
	Count            int    `json:"count"`
	InUseCount       int    `json:"inUseCount"`
	InUseHostCount   int    `json:"inUseHostCount"`
	PhysicalTopology struct {
		Block    string `json:"block"`
		SubBlock string `json:"subBlock"`
	} `json:"physicalTopology"`
	// The block's maintenance (ReservationBlock.reservationMaintenance),
	// or the sub-block's (ReservationSubBlock.reservationSubBlockMaintenance).
	ReservationMaintenance         *maintenanceJSON `json:"reservationMaintenance"`
	ReservationSubBlockMaintenance *maintenanceJSON `json:"reservationSubBlockMaintenance"`
	HealthInfo                     struct {
		HealthStatus string `json:"healthStatus"`
	} `json:"healthInfo"`
}

type maintenanceJSON struct {
	MaintenancePendingCount  int    `json:"maintenancePendingCount"`
	MaintenanceOngoingCount  int    `json:"maintenanceOngoingCount"`
	SchedulingType           string `json:"schedulingType"`
	UpcomingGroupMaintenance struct {
		WindowStartTime string `json:"windowStartTime"`
	} `json:"upcomingGroupMaintenance"`
}

func (j groupJSON) state(g ReservationGroup, topology string) GroupState {
	s := GroupState{Group: g, Topology: topology, Health: j.HealthInfo.HealthStatus, Count: j.Count, InUse: j.InUseCount, InUseHosts: j.InUseHostCount}
	for _, m := range []*maintenanceJSON{j.ReservationSubBlockMaintenance, j.ReservationMaintenance} {
		if m != nil {
			s.Pending, s.Ongoing, s.SchedulingType = m.MaintenancePendingCount, m.MaintenanceOngoingCount, m.SchedulingType
			s.Window, _ = time.Parse(time.RFC3339Nano, m.UpcomingGroupMaintenance.WindowStartTime)
			break
		}
	}
	return s
}

// ReservationGroups reads r's blocks and each block's sub-blocks
// (reservationBlocks.list, reservationSubBlocks.list): their maintenance
// and health. A 403 is ErrPermissionDenied naming the permission.
func (m *Maintainer) ReservationGroups(ctx context.Context, r Reservation) ([]GroupState, error) {
	base := ReservationGroup{Project: r.Project, Zone: r.Zone, Reservation: r.Name}.reservationPath()
	var blocks struct {
		Items []groupJSON `json:"items"`
	}
	if err := m.get(ctx, base+"/reservationBlocks", BlockListPermission, "", &blocks); err != nil {
		return nil, fmt.Errorf("reservationBlocks.list on %s: %w", r, err)
	}
	var out []GroupState
	for _, b := range blocks.Items {
		g := ReservationGroup{Project: r.Project, Zone: r.Zone, Reservation: r.Name, Block: b.Name}
		out = append(out, b.state(g, b.PhysicalTopology.Block))
		var subs struct {
			Items []groupJSON `json:"items"`
		}
		if err := m.get(ctx, g.path()+"/reservationSubBlocks", SubBlockListPermission, "", &subs); err != nil {
			return nil, fmt.Errorf("reservationSubBlocks.list on %s: %w", g, err)
		}
		for _, s := range subs.Items {
			sg := g
			sg.SubBlock = s.Name
			st := s.state(sg, s.PhysicalTopology.SubBlock)
			st.BlockTopology = cmp.Or(s.PhysicalTopology.Block, b.PhysicalTopology.Block)
			out = append(out, st)
		}
	}
	return out, nil
}

// InstanceGroupMaintenance is VM.PerformGroupMaintenance for inst, made
// with m's own identity (the aggregator's, for an agent that asks).
func (m *Maintainer) InstanceGroupMaintenance(ctx context.Context, inst Instance, requestID string, subBlock bool, members int) (string, error) {
	v := &VM{Maintainer: m, inst: inst, resolved: true, account: m.opts.ServiceAccount}
	return v.PerformGroupMaintenance(ctx, requestID, subBlock, members)
}
