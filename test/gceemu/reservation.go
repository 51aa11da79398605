package gceemu

// Reservation blocks and sub-blocks under GROUPED maintenance: the
// instances of one are maintained together. Each VM names the reservation
// block and sub-block it consumes in its instances.get
// (resourceStatus.reservationConsumptionInfo.consumedReservation, and the
// physical topology GKE's labels mirror); a performMaintenance on the
// sub-block (reservationSubBlocks) or the block (reservationBlocks, with a
// maintenanceScope) starts the maintenance of every instance in it.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
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
}

// SetSpareHosts gives s's reservation block n hosts with no running VM,
// their maintenance pending or not (JoinReservation first).
func (s *Server) SetSpareHosts(n int, pending bool) {
	s.mu.Lock()
	b := s.compute.reservation.block
	s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spare, b.sparePending = n, pending
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

// consumedReservation is the resource name the VM's instances.get gives
// for the reservation it consumes ("" for none).
func (s *Server) consumedReservationLocked() (string, map[string]any) {
	m := s.compute.reservation
	if m == nil {
		return "", nil
	}
	at := m.at
	name := fmt.Sprintf("projects/%s/zones/%s/reservations/%s/reservationBlocks/%s/reservationSubBlocks/%s", s.cfg.Project, s.cfg.Zone, at.Reservation, at.Block, at.SubBlock)
	return name, map[string]any{"block": at.Block, "subblock": at.SubBlock, "host": s.cfg.Name}
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
	if s.compute.denied[permission] {
		return http.StatusForbidden, "forbidden", fmt.Sprintf("Required '%s' permission for '%s'", permission, call.Resource), op
	}
	if name, ok := s.compute.byRequestID[call.RequestID]; ok && call.RequestID != "" {
		return http.StatusOK, "", "", s.compute.ops[name]
	}
	if sb.SubBlock == "" && call.Scope != "ALL" && call.Scope != "RUNNING_VMS" && call.Scope != "UNUSED_CAPACITY" {
		return http.StatusBadRequest, "badRequest", fmt.Sprintf("Invalid value for field 'maintenanceScope': '%s'.", call.Scope), op
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
// the instances peers: GROUPED, healthy, their hosts' maintenance counted.
func groupItem(name string, topology map[string]any, maintenanceKey string, peers []*Server) map[string]any {
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
	m := map[string]any{"maintenancePendingCount": pending, "maintenanceOngoingCount": ongoing, "schedulingType": "GROUPED"}
	if pending > 0 {
		m["upcomingGroupMaintenance"] = map[string]any{"type": "SCHEDULED", "canReschedule": true, "maintenanceStatus": StatusPending, "windowStartTime": window}
	}
	return map[string]any{"kind": "compute#reservationBlock", "name": name, "count": len(peers), "inUseCount": len(peers),
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
	m := item["reservationBlockMaintenance"].(map[string]any)
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
	s.mu.Lock()
	m, denied := s.compute.reservation, s.compute.denied[permission]
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
		item := groupItem(m.at.Block, map[string]any{"block": m.at.Block}, "reservationBlockMaintenance", m.blockPeers)
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
			item := groupItem(sub, map[string]any{"block": m.at.Block, "subBlock": sub}, "reservationSubBlockMaintenance", bySub[sub])
			item["kind"] = "compute#reservationSubBlock"
			items = append(items, item)
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "compute#reservationBlocksListResponse", "items": items})
}
