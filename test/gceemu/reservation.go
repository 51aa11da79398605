package gceemu

// Reservation blocks and sub-blocks under GROUPED maintenance: the
// instances of one are maintained together. Each VM names the reservation,
// block and sub-block it consumes in its instances.get, each in a field of
// its own (resourceStatus.reservationConsumptionInfo's
// consumedReservation, consumedReservationBlock and
// consumedReservationSubBlock), and the physical topology GKE's labels
// mirror; a performMaintenance on the sub-block (reservationSubBlocks) or
// the block (reservationBlocks, with a maintenanceScope) starts the
// maintenance of every instance in it.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The IAM permissions of the reservation methods.
const (
	PermissionSubBlockMaintenance = "compute.reservationSubBlocks.performMaintenance"
	PermissionBlockMaintenance    = "compute.reservationBlocks.performMaintenance"
	PermissionListBlocks          = "compute.reservationBlocks.list"
	PermissionListSubBlocks       = "compute.reservationSubBlocks.list"
)

// SubBlock names a reservation's sub-block.
type SubBlock struct {
	Reservation, Block, SubBlock string
}

// membership is one VM's reservation sub-block and the other instances
// in it and in its block.
type membership struct {
	at                        SubBlock
	subBlockPeers, blockPeers []*Server
	// block is the block's own state, shared by its instances.
	block *blockState
}

// blockState is what a block has besides its instances: hosts with no
// running VM (spare), whose maintenance is pending or done.
type blockState struct {
	mu           sync.Mutex
	spare        int
	sparePending bool
	// schedulingType is the reservation's: GROUPED (when empty) or
	// INDEPENDENT.
	schedulingType string
	// noUnusedCapacity: the reservation is a Standard extended
	// reservation, for which a block's UNUSED_CAPACITY maintenance is not
	// allowed.
	noUnusedCapacity bool
}

func (b *blockState) refusesUnused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.noUnusedCapacity
}

func (b *blockState) scheduling() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return cmp.Or(b.schedulingType, "GROUPED")
}

// SetReservationScheduling makes s's reservation's maintenance GROUPED or
// INDEPENDENT (JoinReservation first), as its blocks and sub-blocks say;
// noUnusedCapacity makes it a reservation whose blocks refuse an
// UNUSED_CAPACITY maintenance ("not allowed for Standard ExR", the
// maintenanceScope's description).
func (s *Server) SetReservationScheduling(schedulingType string, noUnusedCapacity bool) {
	b := s.block()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.schedulingType, b.noUnusedCapacity = schedulingType, noUnusedCapacity
}

// SetSpareHosts gives s's reservation block n hosts with no running VM,
// their maintenance pending or not (JoinReservation first).
func (s *Server) SetSpareHosts(n int, pending bool) {
	b := s.block()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spare, b.sparePending = n, pending
}

// block is the state of s's reservation block (JoinReservation first).
func (s *Server) block() *blockState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compute.reservation.block
}

// JoinReservation makes each server an instance of its sub-block, of a
// GROUPED reservation: the servers of one sub-block are its instances,
// and those of one block the block's. Every server must be of one
// project and zone.
func JoinReservation(members map[*Server]SubBlock) {
	blocks := map[SubBlock]*blockState{}
	for s, sb := range members {
		key := SubBlock{Reservation: sb.Reservation, Block: sb.Block}
		if blocks[key] == nil {
			blocks[key] = &blockState{}
		}
		m := &membership{at: sb, block: blocks[key]}
		for o, osb := range members {
			if osb.Reservation != sb.Reservation || osb.Block != sb.Block {
				continue
			}
			m.blockPeers = append(m.blockPeers, o)
			if osb.SubBlock == sb.SubBlock {
				m.subBlockPeers = append(m.subBlockPeers, o)
			}
		}
		s.mu.Lock()
		s.compute.reservation = m
		s.mu.Unlock()
	}
}

// reservationConsumptionLocked is what the VM's instances.get says of the
// reservation it consumes: resourceStatus.reservationConsumptionInfo, the
// reservation, block and sub-block each in a field of its own, and
// resourceStatus.physicalHostTopology (nil, nil for none).
func (s *Server) reservationConsumptionLocked() (consumption, topology map[string]any) {
	m := s.compute.reservation
	if m == nil {
		return nil, nil
	}
	at := m.at
	res := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", s.cfg.Project, s.cfg.Zone, at.Reservation)
	consumption = map[string]any{"consumedReservation": res, "consumedReservationBlock": res + "/reservationBlocks/" + at.Block}
	if at.SubBlock != "" {
		consumption["consumedReservationSubBlock"] = res + "/reservationBlocks/" + at.Block + "/reservationSubBlocks/" + at.SubBlock
	}
	return consumption, map[string]any{"block": at.Block, "subblock": at.SubBlock, "host": s.cfg.Name}
}

// groupMaintenance answers a performMaintenance on a reservation's
// sub-block (subBlock set) or block: every instance of it begins its
// maintenance, once per requestId.
func (s *Server) groupMaintenance(w http.ResponseWriter, r *http.Request, project, zone string, sb SubBlock) {
	method, permission := "reservationSubBlocks.performMaintenance", PermissionSubBlockMaintenance
	if sb.SubBlock == "" {
		method, permission = "reservationBlocks.performMaintenance", PermissionBlockMaintenance
	}
	call := s.callOf(r, method, project, zone, "")
	call.Resource = fmt.Sprintf("projects/%s/zones/%s/reservations/%s/reservationBlocks/%s", project, zone, sb.Reservation, sb.Block)
	if sb.SubBlock != "" {
		call.Resource += "/reservationSubBlocks/" + sb.SubBlock
	} else {
		var body struct {
			MaintenanceScope string `json:"maintenanceScope"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		call.Scope = body.MaintenanceScope
	}
	s.answerCall(w, call, func(call Call) (int, string, string, operation) {
		return s.acceptGroupMaintenance(call, r, sb, permission)
	})
}

func (s *Server) acceptGroupMaintenance(call Call, r *http.Request, sb SubBlock, permission string) (status int, reason, msg string, op operation) {
	if !s.authorized(r) {
		return http.StatusUnauthorized, "authError", "Request had invalid authentication credentials.", op
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.compute.reservation
	if m == nil || call.Project != s.cfg.Project || call.Zone != s.cfg.Zone || m.at.Reservation != sb.Reservation || m.at.Block != sb.Block ||
		sb.SubBlock != "" && m.at.SubBlock != sb.SubBlock {
		return http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", call.Resource), op
	}
	if s.lacksLocked(call.Token, permission) {
		return http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for '%s'", permission, call.Resource), op
	}
	if name, ok := s.compute.byRequestID[call.RequestID]; ok && call.RequestID != "" {
		return http.StatusOK, "", "", s.compute.ops[name]
	}
	if sb.SubBlock == "" && call.Scope != "ALL" && call.Scope != "RUNNING_VMS" && call.Scope != "UNUSED_CAPACITY" {
		return http.StatusBadRequest, "badRequest", fmt.Sprintf("Invalid value for field 'maintenanceScope': '%s'.", call.Scope), op
	}
	if sb.SubBlock == "" && call.Scope == "UNUSED_CAPACITY" && m.block.refusesUnused() {
		return http.StatusBadRequest, "invalid", "Invalid value for field 'maintenanceScope': 'UNUSED_CAPACITY'. It is not allowed for Standard extended reservations.", op
	}
	op = s.newOperationLocked("performMaintenance", call.RequestID)
	members := m.subBlockPeers
	if sb.SubBlock == "" {
		members = m.blockPeers
	}
	if sb.SubBlock == "" && call.Scope == "UNUSED_CAPACITY" {
		members = nil // no running instance is touched: the spare hosts are maintained
	}
	if sb.SubBlock == "" && call.Scope != "RUNNING_VMS" && op.err == "" {
		m.block.mu.Lock()
		m.block.sparePending = false
		m.block.mu.Unlock()
	}
	if op.err == "" {
		// Every instance begins its maintenance, this one included: each
		// takes its own lock, so not under this one's.
		go s.sliceFollows(members, true, s.clock.Now())
	}
	return http.StatusOK, "", "", op
}

// maintenanceOf is the state of o's maintenance, for its group's counts:
// pending (a notice PENDING), ongoing (the notice ONGOING or
// TERMINATE_ON_HOST_MAINTENANCE), or neither.
func (o *Server) maintenanceOf() (pending, ongoing bool, window string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.event == EventTerminate || o.notice != nil && o.notice.MaintenanceStatus == StatusOngoing {
		return false, true, ""
	}
	if o.notice != nil && o.notice.MaintenanceStatus == StatusPending {
		return true, false, o.notice.WindowStartTime
	}
	return false, false, ""
}

// groupItem is a reservationBlocks or reservationSubBlocks list item for
// the instances peers (one a host): healthy, their hosts' maintenance
// counted, scheduled as schedulingType says.
func groupItem(name string, topology map[string]any, maintenanceKey, schedulingType string, peers []*Server) map[string]any {
	pending, ongoing, window := 0, 0, ""
	for _, o := range peers {
		p, g, w := o.maintenanceOf()
		if p {
			pending++
			if window == "" || w < window {
				window = w
			}
		}
		if g {
			ongoing++
		}
	}
	m := map[string]any{"maintenancePendingCount": pending, "maintenanceOngoingCount": ongoing, "schedulingType": schedulingType,
		"instanceMaintenancePendingCount": pending, "instanceMaintenanceOngoingCount": ongoing}
	if pending > 0 {
		up := map[string]any{"type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": StatusPending}
		if t, err := time.Parse(time.RFC3339, window); err == nil {
			up["windowStartTime"] = ComputeTime(t)
		}
		m["upcomingGroupMaintenance"] = up
	}
	return map[string]any{"kind": "compute#reservationBlock", "name": name, "count": len(peers), "inUseCount": len(peers), "inUseHostCount": len(peers),
		"physicalTopology": topology, maintenanceKey: m, "healthInfo": map[string]any{"healthStatus": "HEALTHY"}}
}

// addSpare counts the block's spare hosts into its list item.
func (b *blockState) addSpare(item map[string]any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	item["count"] = item["count"].(int) + b.spare
	if !b.sparePending {
		return
	}
	m := item["reservationMaintenance"].(map[string]any)
	m["maintenancePendingCount"] = m["maintenancePendingCount"].(int) + b.spare
	if _, ok := m["upcomingGroupMaintenance"]; !ok {
		m["upcomingGroupMaintenance"] = map[string]any{"type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": StatusPending}
	}
}

// listGroups answers reservationBlocks.list (sb.Block empty) or
// reservationSubBlocks.list on the reservation (and block) this VM's
// reservation is: the block it is in, or that block's sub-blocks.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request, project, zone string, sb SubBlock) {
	if !s.authorized(r) {
		computeError(w, http.StatusUnauthorized, "authError", "Request had invalid authentication credentials.")
		return
	}
	permission, resource := PermissionListBlocks, fmt.Sprintf("projects/%s/zones/%s/reservations/%s", project, zone, sb.Reservation)
	if sb.Block != "" {
		permission, resource = PermissionListSubBlocks, resource+"/reservationBlocks/"+sb.Block
	}
	denied := s.lacks(r, permission)
	s.mu.Lock()
	m := s.compute.reservation
	s.mu.Unlock()
	switch {
	case denied:
		forbidden(w, permission, resource)
		return
	case m == nil || project != s.cfg.Project || zone != s.cfg.Zone || m.at.Reservation != sb.Reservation || sb.Block != "" && sb.Block != m.at.Block:
		computeError(w, http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' was not found", resource))
		return
	}
	var items []map[string]any
	if sb.Block == "" {
		item := groupItem(m.at.Block, map[string]any{"block": m.at.Block}, "reservationMaintenance", m.block.scheduling(), m.blockPeers)
		m.block.addSpare(item)
		items = append(items, item)
	} else {
		bySub := map[string][]*Server{}
		var order []string
		for _, o := range m.blockPeers {
			o.mu.Lock()
			sub := o.compute.reservation.at.SubBlock
			o.mu.Unlock()
			if _, ok := bySub[sub]; !ok {
				order = append(order, sub)
			}
			bySub[sub] = append(bySub[sub], o)
		}
		for _, sub := range order {
			item := groupItem(sub, map[string]any{"block": m.at.Block, "subBlock": sub}, "reservationSubBlockMaintenance", m.block.scheduling(), bySub[sub])
			item["kind"] = "compute#reservationSubBlock"
			items = append(items, item)
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	kind := "compute#reservationBlocksListResponse"
	if sb.Block != "" {
		kind = "compute#reservationSubBlocksListResponse"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": kind, "items": items})
}
