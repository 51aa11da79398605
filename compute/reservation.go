package compute

// A reservation's block or sub-block under GROUPED maintenance is
// maintained as one unit: once every node of the group is drained, one
// call starts the group's maintenance, at its scope
// (reservationSubBlocks.performMaintenance, or
// reservationBlocks.performMaintenance with a maintenanceScope). The VM
// names the reservation it consumes in its own instances.get
// (resourceStatus.reservationConsumptionInfo.consumedReservation).

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
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
	s := fmt.Sprintf("projects/%s/zones/%s/reservations/%s/reservationBlocks/%s", g.Project, g.Zone, g.Reservation, g.Block)
	if g.SubBlock != "" {
		s += "/reservationSubBlocks/" + g.SubBlock
	}
	return s
}

func (g ReservationGroup) path() string {
	p := "projects/" + url.PathEscape(g.Project) + "/zones/" + url.PathEscape(g.Zone) + "/reservations/" + url.PathEscape(g.Reservation) +
		"/reservationBlocks/" + url.PathEscape(g.Block)
	if g.SubBlock != "" {
		p += "/reservationSubBlocks/" + url.PathEscape(g.SubBlock)
	}
	return p
}

// ParseConsumedReservation reads a consumedReservation (a resource name
// or URL ending in reservations/R/reservationBlocks/B, with
// /reservationSubBlocks/S where it names one) of a VM in inst's project
// and zone; false when it names no block.
func ParseConsumedReservation(inst Instance, s string) (ReservationGroup, bool) {
	parts := strings.Split(strings.Trim(s, "/"), "/")
	g := ReservationGroup{Project: inst.Project, Zone: inst.Zone}
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

// PerformGroupMaintenance starts the maintenance of the reservation group
// the VM runs in, once: its sub-block (subBlock) or its block (with scope
// ALL). It reads which one with instances.get.
func (v *VM) PerformGroupMaintenance(ctx context.Context, requestID string, subBlock bool) (string, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return "", err
	}
	sc, err := v.Maintainer.scheduling(ctx, inst, account)
	if err != nil {
		return "", err
	}
	g, ok := ParseConsumedReservation(inst, sc.Reservation)
	if !ok || subBlock && g.SubBlock == "" {
		return "", fmt.Errorf("%s (consumedReservation %q): %w", inst, sc.Reservation, ErrNoReservationGroup)
	}
	if !subBlock {
		g.SubBlock = ""
	}
	return v.Maintainer.performGroup(ctx, g, ScopeAll, requestID, account)
}
