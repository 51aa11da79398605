package aggregator

// Reservation groups' own state: where the operator names reservations
// (--reservations, opt-in), the leader reads each one's blocks and
// sub-blocks every ReservationInterval (Compute Engine's counts of the
// hosts whose maintenance is pending or under way, and their health),
// exports them as metrics, and writes on each node of a group what
// Compute Engine said of it (protocol.AnnotationReservationGroup), for
// `kubectl gce-maintenance status` and for people.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/google/uuid"
	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// ReservationReader reads a reservation's blocks and sub-blocks, and
// starts a block's maintenance at a scope; compute.Maintainer implements
// it.
type ReservationReader interface {
	ReservationGroups(ctx context.Context, r compute.Reservation) ([]compute.GroupState, error)
	PerformGroupMaintenance(ctx context.Context, g compute.ReservationGroup, scope, requestID string) (string, error)
}

// followReservations reads the reservations until ctx ends (the lead is
// lost), every ReservationInterval; an error is logged and counted, and
// the reading tried again with backoff (a missing permission waits the
// whole interval).
func (a *Aggregator) followReservations(ctx context.Context) {
	defer func() {
		a.opts.Metrics.ReservationHosts.Reset()
		a.opts.Metrics.ReservationHealthy.Reset()
	}()
	asked := map[string]time.Time{} // block -> the window its unused capacity was asked for
	for attempt := 1; ctx.Err() == nil; {
		delay := a.opts.ReservationInterval
		states, err := a.readReservations(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, compute.ErrPermissionDenied):
			a.log.Warn("the reservations cannot be read; grant the aggregator's service account the permissions the README lists, or drop --reservations", "err", err)
		case err != nil:
			delay = min(backoff.Default.Delay(attempt), delay)
			attempt++
			a.log.Warn("the reservations not read; retrying", "err", err, "retry_in", delay)
		default:
			attempt = 1
			a.publishReservations(ctx, states)
			if a.opts.MaintainUnusedCapacity {
				a.maintainUnusedCapacity(ctx, states, asked)
			}
		}
		if backoff.Wait(ctx, a.opts.Clock, delay) != nil {
			return
		}
	}
}

func (a *Aggregator) readReservations(ctx context.Context) ([]compute.GroupState, error) {
	var all []compute.GroupState
	for _, r := range a.opts.Reservations {
		states, err := a.opts.ReservationReader.ReservationGroups(ctx, r)
		if err != nil {
			return nil, err
		}
		all = append(all, states...)
	}
	return all, nil
}

// publishReservations exports states and writes each group's on its
// nodes: the groups of the configured scope, matched to the nodes by
// GKE's topology label (the group's physical topology ID), where the
// aggregator's read of the node's VM proves it runs there.
func (a *Aggregator) publishReservations(ctx context.Context, states []compute.GroupState) {
	m := a.opts.Metrics
	m.ReservationHosts.Reset()
	m.ReservationHealthy.Reset()
	byTopology := map[string]protocol.ReservationGroupState{}
	blocks := map[string]compute.GroupState{}
	for _, s := range states {
		if s.Group.SubBlock == "" {
			blocks[s.Group.String()] = s
		}
	}
	for _, s := range states {
		scope := protocol.ReservationGroupBlock
		if s.Group.SubBlock != "" {
			scope = protocol.ReservationGroupSubblock
		}
		// A sub-block's ID is unique only within its block.
		name := s.Group.Block
		if s.Group.SubBlock != "" {
			name = s.Group.Block + "/" + s.Group.SubBlock
		}
		m.ReservationHosts.WithLabelValues(s.Group.Reservation, scope, name, "pending").Set(float64(s.Pending))
		m.ReservationHosts.WithLabelValues(s.Group.Reservation, scope, name, "ongoing").Set(float64(s.Ongoing))
		if s.Health != "" {
			healthy := 0.0
			if s.Health == "HEALTHY" {
				healthy = 1
			}
			m.ReservationHealthy.WithLabelValues(s.Group.Reservation, scope, name).Set(healthy)
		}
		if scope == a.opts.ReservationGroups && s.Topology != "" {
			// Keyed as protocol.Grouping names the group of a node: the
			// block's topology ID, and the sub-block's within it.
			key := s.Topology
			if scope == protocol.ReservationGroupSubblock {
				key = s.BlockTopology + "/" + s.Topology
			}
			st := protocol.ReservationGroupState{Scope: scope, Reservation: s.Group.Reservation, Block: s.Group.Block,
				SubBlock: s.Group.SubBlock, Pending: s.Pending, Ongoing: s.Ongoing, Window: s.Window, Health: s.Health}
			if scope == protocol.ReservationGroupSubblock {
				block := s.Group
				block.SubBlock = ""
				st.BlockPending, st.BlockOngoing = blocks[block.String()].Pending, blocks[block.String()].Ongoing
			}
			byTopology[key] = st
		}
	}
	if a.opts.grouping().ReservationLabel() == "" {
		return
	}
	var names []string
	want := map[string]string{}
	shown := map[string]*corev1.Node{}
	for _, o := range (shownNodes{a}).List() {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		g := a.opts.grouping().GroupOf(n)
		st, known := byTopology[g.Name]
		// Only to a proven member: a node's topology labels are its
		// kubelet's word (protocol.Grouping.Unproven).
		known = known && g.Kind == protocol.GroupReservation && a.opts.grouping().Unproven(n) == ""
		value := ""
		if known {
			value = st.Encode()
		}
		if n.Annotations[protocol.AnnotationReservationGroup] != value {
			names, want[n.Name], shown[n.Name] = append(names, n.Name), value, n
		}
	}
	sort.Strings(names)
	a.writeReservationStates(ctx, names, want, shown)
}

// writeReservationStates writes on each node of names its group's state
// (want; "" removes it), as the node shown to the aggregator was.
func (a *Aggregator) writeReservationStates(ctx context.Context, names []string, want map[string]string, shown map[string]*corev1.Node) {
	for _, name := range names {
		if before := shown[name]; a.observed(before) {
			after := before.DeepCopy()
			if after.Annotations == nil {
				after.Annotations = map[string]string{}
			}
			if after.Annotations[protocol.AnnotationReservationGroup] = want[name]; want[name] == "" {
				delete(after.Annotations, protocol.AnnotationReservationGroup)
			}
			_ = a.writeNode(ctx, before, after) // kept, not written
			continue
		}
		if _, err := a.opts.Client.PatchNode(ctx, name, types.MergePatchType, annotationPatch(protocol.AnnotationReservationGroup, want[name]), "", ""); err != nil {
			a.log.Warn("the reservation group's state not written on the node", "node", name, "err", fmt.Sprint(err))
		}
	}
}

// maintainUnusedCapacity starts, once per group window, the maintenance
// of the unused capacity of every GROUPED block whose maintenance is
// pending in a known window and which has spare hosts
// (fleet.UnusedCapacityFirst): no workload runs there. The requestId is
// the block's and the window's, so that a new leader's call is the same
// request and each window's is a new one. A call refused (a 400: the
// scope is not allowed for Standard extended reservations) or denied (a
// 403) is not made again until the block's window changes.
func (a *Aggregator) maintainUnusedCapacity(ctx context.Context, states []compute.GroupState, asked map[string]time.Time) {
	byName := map[string]compute.ReservationGroup{}
	var blocks []fleet.ReservationBlock
	for _, s := range states {
		if s.Group.SubBlock != "" {
			continue
		}
		name := s.Group.String()
		byName[name] = s.Group
		blocks = append(blocks, fleet.ReservationBlock{Name: name, Grouped: s.SchedulingType == "GROUPED", Pending: s.Pending, Ongoing: s.Ongoing,
			Count: s.Count, InUse: s.InUseHosts, Window: s.Window})
	}
	cfg, _ := a.config()
	for _, b := range fleet.UnusedCapacityFirst(blocks, asked) {
		g := byName[b.Name]
		if a.opts.ObserveOnly || cfg.Observe.Cluster {
			// A Compute Engine call on the block: not made while the
			// cluster is observed only.
			a.opts.Metrics.UnusedCapacity.WithLabelValues(g.Reservation, g.Block, protocol.ManualObserved).Inc()
			a.log.Info("observe-only: the unused capacity of the reservation block would be maintained first; not asked", "block", b.Name, "spare_hosts", b.Count-b.InUse)
			asked[b.Name] = b.Window
			continue
		}
		id := uuid.NewSHA1(uuid.NameSpaceURL, []byte(b.Name+"@"+b.Window.UTC().Format(time.RFC3339))).String()
		op, err := a.opts.ReservationReader.PerformGroupMaintenance(ctx, g, compute.ScopeUnusedCapacity, id)
		outcome := "accepted"
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, compute.ErrPermissionDenied):
			outcome = "permission_denied"
		case errors.Is(err, compute.ErrRefused):
			outcome = "refused"
		case err != nil:
			outcome = "failed"
		}
		a.opts.Metrics.UnusedCapacity.WithLabelValues(g.Reservation, g.Block, outcome).Inc()
		if err != nil {
			a.log.Warn("the unused capacity of the reservation block was not maintained", "block", b.Name, "outcome", outcome, "err", err)
			if outcome != "failed" {
				asked[b.Name] = b.Window // not again this window
			}
			continue
		}
		asked[b.Name] = b.Window
		a.log.Info("maintaining the reservation block's unused capacity first", "block", b.Name, "spare_hosts", b.Count-b.InUse, "operation", op)
	}
}

// annotationPatch is the merge patch that sets one annotation of a Node to
// value ("" removes it).
func annotationPatch(key, value string) []byte {
	var v any = value
	if value == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	return patch
}
