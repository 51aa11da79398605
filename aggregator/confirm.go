package aggregator

// A forced maintenance of a member of a multi-host slice or a gang moves
// the other members only once the leader has confirmed it from what the
// node cannot write (lifecycle.ConfirmsCause): it reads the member's VM
// itself from Compute Engine (instances.get), which must be stopping or
// gone, or, for a host maintenance, have its maintenance ONGOING or its
// window imminent; a repair also by the relay's report of it, accepted
// and its place still holding. A confirmed cause is read again until its
// VM runs again, started after the maintenance began: then the others
// come back, whatever the member's agent says. Until then the member's
// agent state is its word alone:
// it drains itself, and no ask is written on the others (slices.go), whose
// agents follow a forced cause only through that ask.
//
// One confirmed forced maintenance a VM start (its lastStartTimestamp, a
// fact of Compute Engine's): a member that says it is stopping again, in
// the same start, moves nobody. Each refusal is said once per maintenance
// (a Warning GroupCauseUnconfirmed on the node, a log line, and
// unconfirmed_group_causes_total), and an unconfirmed maintenance is read
// again, with backoff, within the node's share of VM reads
// (relaylimit.go): a real preemption is seen as soon as Compute Engine
// begins to stop the VM.
//
// The leader keeps what it confirmed in memory. A new leader reads again;
// an ask already written for a maintenance (the aggregator's own key)
// stands for its confirmation (fleet.SliceAsks), so a failover withdraws
// no ask. The bound on a VM's start starts afresh with a new leader.

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// confirmReadTimeout bounds one read of a member's VM with its retries.
const confirmReadTimeout = 30 * time.Second

// confirmBackoff is the longest wait before an unconfirmed maintenance's
// VM is read again (the first wait is a second, doubled each read).
const confirmBackoff = 10 * time.Second

// confirmer holds the leader's confirmations, by node name (its zero
// value holds none).
type confirmer struct {
	mu     sync.Mutex
	claims map[string]*claim
	// spent: the VM start whose forced maintenance moved the node's group,
	// and that maintenance's start, by node.
	spent map[string][2]time.Time
}

// claim is one forced maintenance a node's agent says is under way.
type claim struct {
	reason  protocol.Reason
	started time.Time
	// confirmed: it moves the group; reading: a read of the VM is under
	// way; told: its refusal was said; next: no read before.
	confirmed, reading, told bool
	tries                    int
	next                     time.Time
}

// forget drops what the last term confirmed.
func (c *confirmer) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims, c.spent = nil, nil
}

// confirmedCause says whether the leader confirmed node name's forced
// maintenance (reason, started at started): fleet.Confirmed. Where the
// agents make their own Compute Engine calls (NodesCallCompute) a node's
// word is taken: its VM's identity may stop any VM anyway.
func (a *Aggregator) confirmedCause(name string, reason protocol.Reason, started time.Time) bool {
	if a.opts.NodesCallCompute {
		return true
	}
	c := &a.confirms
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.claims[name]
	return cl != nil && cl.confirmed && cl.reason == reason && cl.started.Equal(started)
}

// forcedClaim: v is a proven member of a slice or gang whose agent says a
// forced maintenance of its own is under way.
func forcedClaim(v *fleet.Node) bool {
	return v.Slice != "" && v.GroupKind != protocol.GroupReservation && !v.SliceUnproven && (protocol.AgentState{Phase: v.Phase}).Active() &&
		v.Reason != protocol.ReasonManual && v.Reason != protocol.ReasonSlice && v.Reason != "" && !v.Deadline.IsZero()
}

// confirmCauses starts the reads that confirm the forced maintenances the
// pass sees (one in flight per node), and settles a repair's at once.
func (a *Aggregator) confirmCauses(ctx context.Context, nodes *fleet.Fleet, decidedOn map[string]*corev1.Node) {
	if a.opts.NodesCallCompute {
		return
	}
	c, now := &a.confirms, a.opts.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims, c.spent = map[string]*claim{}, map[string][2]time.Time{}
	}
	claimed := map[string]bool{}
	for _, v := range nodes.All() {
		n := decidedOn[v.Name]
		if n == nil || !forcedClaim(v) {
			continue
		}
		claimed[v.Name] = true
		cl := c.claims[v.Name]
		if cl == nil || cl.reason != v.Reason || !cl.started.Equal(v.Started) {
			cl = &claim{reason: v.Reason, started: v.Started}
			c.claims[v.Name] = cl
		}
		switch {
		case cl.reading || now.Before(cl.next):
		case a.relay == nil:
			if !cl.confirmed {
				a.settleLocked(n, cl, lifecycle.VMNow{}, false, fmt.Errorf("the aggregator makes no Compute Engine calls"))
			}
		default:
			// A repair's report the relay accepted confirms it while the
			// answer's place holds (the VM stops once the report's
			// operation is done); the VM is read all the same, so that
			// the bound on its start holds for repairs too, and a
			// confirmed cause is read again until the VM is back.
			cl.reading = true
			go a.readCause(ctx, n, cl, v.Reason == protocol.ReasonFault && now.Before(v.ReportUntil))
		}
	}
	for name := range c.claims {
		if !claimed[name] {
			delete(c.claims, name)
		}
	}
	for name := range c.spent {
		if decidedOn[name] == nil {
			delete(c.spent, name)
		}
	}
}

// readCause reads n's VM for cl (reported: the relay's accepted report of
// n's repair holds), settles it and wakes a pass.
func (a *Aggregator) readCause(ctx context.Context, n *corev1.Node, cl *claim, reported bool) {
	var vm lifecycle.VMNow
	inst, err := instanceOf(n, a.opts.Home)
	if err == nil {
		if d, refund := a.relay.buckets.take(n.Name, relayRead); d > 0 {
			refund()
			a.opts.Metrics.RelayLimited.WithLabelValues(relayRead).Inc()
			a.confirms.mu.Lock()
			cl.reading, cl.next = false, a.opts.Clock.Now().Add(d)
			a.confirms.mu.Unlock()
			return
		}
		cctx, cancel := context.WithTimeout(ctx, confirmReadTimeout)
		var sc compute.Scheduling
		sc, err = a.relay.caller.Scheduling(cctx, inst)
		cancel()
		outcome := compute.Outcome(err)
		switch {
		case compute.NotFound(err):
			vm.Gone, err, outcome = true, nil, ""
		case err == nil:
			vm = lifecycle.VMNow{Status: sc.Status, LastStart: sc.LastStart, MaintenanceStatus: sc.MaintenanceStatus, MaintenanceStart: sc.MaintenanceStart, End: sc.End}
		}
		if ctx.Err() == nil {
			a.opts.Metrics.ComputeCalls.WithLabelValues("instances.get", cmp.Or(outcome, "accepted")).Inc()
		}
	}
	a.confirms.mu.Lock()
	cl.reading = false
	again := time.Duration(0)
	if ctx.Err() == nil {
		again = a.settleLocked(n, cl, vm, reported, err)
	}
	a.confirms.mu.Unlock()
	a.poke()
	if again > 0 && waitOn(ctx, a.opts.Clock, again) {
		a.poke() // a pass reads it again
	}
}

// settleLocked records what the read (vm, or readErr) or the approval
// says of cl, n's claim; a refusal is said once per claim. It says when
// to read again (0: confirmed).
func (a *Aggregator) settleLocked(n *corev1.Node, cl *claim, vm lifecycle.VMNow, reported bool, readErr error) time.Duration {
	c, now := &a.confirms, a.opts.Clock.Now()
	cl.reading = false
	if cl.confirmed {
		return a.recheckLocked(n, cl, vm, readErr, now)
	}
	ok, why, kind := false, "", "unconfirmed"
	if readErr != nil {
		why = "the aggregator could not read its VM from Compute Engine: " + readErr.Error()
	} else {
		ok, why = lifecycle.ConfirmsCause(cl.reason, vm, reported, lifecycle.DefaultConfig.KnownEndLead, now)
	}
	if spent, had := c.spent[n.Name]; ok && had && !vm.LastStart.IsZero() && spent[0].Equal(vm.LastStart) && !spent[1].Equal(cl.started) {
		ok, kind = false, "bound"
		why = fmt.Sprintf("its VM's start at %s already moved its group once, for a maintenance started at %s: one forced maintenance a start moves it",
			vm.LastStart.UTC().Format(time.RFC3339), spent[1].UTC().Format(time.RFC3339))
	}
	if ok {
		cl.confirmed, cl.next = true, now.Add(confirmRecheck)
		if !vm.LastStart.IsZero() {
			c.spent[n.Name] = [2]time.Time{vm.LastStart, cl.started}
		}
		a.log.Info("a group member's forced maintenance confirmed", "node", n.Name, "reason", cl.reason, "status", vm.Status, "gone", vm.Gone)
		return confirmRecheck
	}
	cl.tries++
	again := min(time.Second<<min(cl.tries-1, 10), confirmBackoff)
	cl.next = now.Add(again)
	if cl.told {
		return again
	}
	cl.told = true
	a.opts.Metrics.UnconfirmedCauses.WithLabelValues(string(cl.reason), kind).Inc()
	a.log.Warn("a group member's forced maintenance moves no other member: not confirmed", "node", n.Name, "reason", cl.reason, "why", why)
	a.nodeEvent(n.Name, n.UID, true, protocol.EventCauseUnconfirmed, fmt.Sprintf(
		"This node's agent says its %s is under way; it moves no other member of its group until Compute Engine bears it out: %s", cl.reason, why))
	return again
}

// confirmRecheck is how often a confirmed forced maintenance's VM is read
// again, within the node's share of VM reads: once it runs again, started
// after the maintenance began, the maintenance is over whatever its agent
// still says, and the others come back.
const confirmRecheck = 5 * time.Minute

// recheckLocked is settleLocked for a confirmed claim read again: one
// whose VM runs again, started after the maintenance began, is confirmed
// no longer (and not said as refused); else it is read again later.
func (a *Aggregator) recheckLocked(n *corev1.Node, cl *claim, vm lifecycle.VMNow, readErr error, now time.Time) time.Duration {
	cl.next = now.Add(confirmRecheck)
	if readErr == nil && !vm.Gone && vm.Status == "RUNNING" && vm.LastStart.After(cl.started) {
		cl.confirmed, cl.told = false, true
		a.log.Info("a group member's forced maintenance is over: its VM runs again", "node", n.Name, "reason", cl.reason, "started", vm.LastStart)
	}
	return confirmRecheck
}
