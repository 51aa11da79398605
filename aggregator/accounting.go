package aggregator

// Interruption accounting: what only a cluster-wide view can count. A
// maintenance or preemption beginning on a node is counted per pool; a Node
// deleted and created again under its name within the recreate window was
// repaired (AutoRepair), and the repair is counted on the new Node under
// the aggregator's own key (protocol.AnnotationRepairs) with the counts the
// old object carried; a Node deleted while NotReady and outside
// maintenance, and not created again within the window, vanished
// (TerminationEvent/HostError). What the aggregator holds of a node (the
// repairs it approved of it, what it added to its pool's counters within
// the hour: claimwindow.go) is held by the node's name past its Node
// object's deletion, until it expires: a Node deleted and registered again
// lifts no bound. The ledger below is the pure core, driven by the times
// it is given; the Aggregator's methods feed it from the node informer and
// act on what it returns, as the leader only.

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// deletedNode is a Node the ledger remembers after its deletion.
type deletedNode struct {
	name string
	uid  types.UID
	pool string
	// counts are every interruption the object carried (the agent's and
	// earlier repairs); lastRepair, how the VM's last fault repair ended
	// (zero for none).
	counts     protocol.Counts
	lastRepair protocol.LastFaultRepair
	// approved is the aggregator's record of the repairs it approved of
	// the VM, by pool (protocol.Repairs.Approved).
	approved map[string]time.Time
	at       time.Time
	// vanishing: deleted while NotReady and outside maintenance; counted
	// as vanished unless created again within the window.
	vanishing bool
}

// ledger remembers deleted Nodes for the recreate window. It is not safe
// for concurrent use.
type ledger struct {
	window time.Duration
	gone   map[string]deletedNode
	// recreated lists Nodes created again under a name in gone, whose
	// repair is still to be written.
	recreated []string
	// approved keeps, by name, the repairs the aggregator approved of the
	// Nodes deleted, past the recreate window, until they expire (kept):
	// a pool's repairRate counts them whether the Node comes back or not,
	// and under whatever pool it comes back.
	approved fleet.Kept
}

func newLedger(window time.Duration) *ledger {
	return &ledger{window: window, gone: map[string]deletedNode{}, approved: fleet.Kept{}}
}

// deleted records n's deletion at now; pool is its pool. Deletions older
// than the window that cannot vanish are forgotten.
func (l *ledger) deleted(n *corev1.Node, pool string, now time.Time) {
	for name, d := range l.gone {
		if now.Sub(d.at) > l.window && !d.vanishing {
			delete(l.gone, name)
		}
	}
	approved := ownApprovals(n, pool)
	l.gone[n.Name] = deletedNode{name: n.Name, uid: n.UID, pool: pool, counts: protocol.NodeInterruptions(n), at: now,
		lastRepair: ownLastRepair(n, now), approved: approved,
		vanishing: !fleet.NodeReady(n) && !protocol.InMaintenance(n) && !removedOnPurpose(n)}
	for p, at := range approved {
		if l.approved[n.Name] == nil {
			l.approved[n.Name] = map[string]time.Time{}
		}
		if at.After(l.approved[n.Name][p]) {
			l.approved[n.Name][p] = at
		}
	}
}

// ownApprovals are the repairs the aggregator approved of n's VM, by pool:
// its record on n, and an approval still on n (written, by an aggregator
// that kept no record, in pool).
func ownApprovals(n *corev1.Node, pool string) map[string]time.Time {
	r := protocol.ReadRepairs(n)
	if a, ok := protocol.ReadRepairApproval(n); ok && !a.Approved.IsZero() {
		r.Approve(pool, a.Approved)
	}
	return r.Approved
}

// kept prunes the approvals kept by name that no pool counts any more at
// now (older than window(pool): its repairRate's window or its cool-down)
// and returns a copy of the rest.
func (l *ledger) kept(now time.Time, window func(pool string) time.Duration) fleet.Kept {
	out := fleet.Kept{}
	for name, approved := range l.approved {
		for pool, at := range approved {
			if now.Sub(at) >= window(pool) {
				delete(approved, pool)
			}
		}
		if len(approved) == 0 {
			delete(l.approved, name)
			continue
		}
		out[name] = maps.Clone(approved)
	}
	return out
}

// ownLastRepair is the last fault repair of n's VM, deleted at now, as
// the aggregator itself knows it: one it approved (its approval is still
// on the Node) ends now, else its own record on n says. The agent's
// last-fault-repair is never copied into the aggregator's record: it is
// the node's word, and rewritten would hold its pool's repairRate.
func ownLastRepair(n *corev1.Node, now time.Time) protocol.LastFaultRepair {
	if _, approved := protocol.ReadRepairApproval(n); approved {
		return protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: now}
	}
	if own := protocol.ReadRepairs(n).LastRepair; own != nil {
		return *own
	}
	return protocol.LastFaultRepair{}
}

// added takes in n's creation at now: a Node created again under the name
// of one deleted within the window is a repair to write.
func (l *ledger) added(n *corev1.Node, now time.Time) {
	d, ok := l.gone[n.Name]
	if !ok || d.uid == n.UID || now.Sub(d.at) > l.window {
		return
	}
	l.recreated = append(l.recreated, n.Name)
	d.vanishing = false // it came back: a repair, not a loss
	l.gone[n.Name] = d
}

// takeRecreated returns the repairs to write (and forgets them: retry
// returns those that could not be written) with the deletion each
// replaced.
func (l *ledger) takeRecreated() []deletedNode {
	out := make([]deletedNode, 0, len(l.recreated))
	for _, name := range l.recreated {
		out = append(out, l.gone[name])
	}
	l.recreated = nil
	return out
}

// retry puts a repair back to be written at the next pass.
func (l *ledger) retry(d deletedNode) { l.recreated = append(l.recreated, d.name) }

// vanished returns (and forgets) the Nodes deleted while vanishing that
// were not created again within the window, as of now.
func (l *ledger) vanished(now time.Time) []deletedNode {
	var out []deletedNode
	for name, d := range l.gone {
		if d.vanishing && now.Sub(d.at) > l.window {
			out = append(out, d)
			delete(l.gone, name)
		}
	}
	return out
}

// repairOf is what to write on n, the Node that replaced d: the repair on
// top of what d carried, and how the VM's last fault repair ended (the
// pool's cool-down and repairRate count it still). False when n already
// records it.
func repairOf(n *corev1.Node, d deletedNode) (protocol.Repairs, bool) {
	if protocol.ReadRepairs(n).RecreatedFrom == d.uid {
		return protocol.Repairs{}, false
	}
	r := protocol.Repairs{RecreatedFrom: d.uid, Interruptions: d.counts.Add(protocol.Repair, 1)}
	if d.lastRepair.Outcome != "" {
		last := d.lastRepair
		r.LastRepair = &last
	}
	// The approvals of the VM: those d carried, and any the aggregator
	// made on n since.
	r.Approved = maps.Clone(d.approved)
	for pool, at := range protocol.ReadRepairs(n).Approved {
		r.Approve(pool, at)
	}
	return r, true
}

// maxCountStep is the most one interruption's count on a Node may grow in
// one update and be counted: the agent counts one at a time, and a watch
// that missed updates may see a few at once.
const maxCountStep = 8

// begun lists the interruptions the node's agent counted between old and
// cur (its counts grew), each by its reason, but a host maintenance that was
// a manual or opportunistic one (the agent counts it when Compute Engine
// begins it, or when the VM comes back from it), which is counted under
// its own reason. A slice's drain is never counted by the host that
// follows it: the host that stops counts itself.
func begun(old, cur *corev1.Node) []protocol.Interruption {
	before, after := protocol.ReadAgentState(old), protocol.ReadAgentState(cur)
	var out []protocol.Interruption
	for key, n := range after.Interruptions {
		i, ok := protocol.ParseInterruptionKey(key)
		if !ok {
			continue
		}
		if i == protocol.HostMaintenance && voluntary(before, after) {
			i = protocol.ManualMaintenance
			if _, _, ms := protocol.ReadTrigger(old); ms.OpportunisticTriggered {
				i = protocol.OpportunisticMaintenance
			}
		}
		// An agent counts one interruption at a time: a count that jumps
		// further in one update is not believed.
		if step := n - before.Interruptions[key]; step <= maxCountStep {
			for range step {
				out = append(out, i)
			}
		}
	}
	return out
}

// voluntary: the maintenance the agent counts between before and after is a
// manual (or opportunistic) one: under way, or the one that ended with it.
func voluntary(before, after protocol.AgentState) bool {
	return after.Reason == protocol.ReasonManual || !after.Active() && before.Reason == protocol.ReasonManual
}

// removedOnPurpose: a node cordoned, or tainted by the cluster autoscaler,
// before it went was removed (scale-down, decommission), not lost.
func removedOnPurpose(n *corev1.Node) bool {
	return n.Spec.Unschedulable || protocol.HasTaintKey(n, protocol.TaintToBeDeleted)
}

func (a *Aggregator) nodeDeleted(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// What the node claimed within the hour stays by its name: a Node
	// deleted and created again is the same VM, under the same bound.
	a.ledger.deleted(n, n.Labels[a.opts.PoolLabel], a.opts.Clock.Now())
}

func (a *Aggregator) nodeAdded(o any) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ledger.added(n, a.opts.Clock.Now())
}

// observeNode counts, per pool, the interruptions a node's agent counts
// (the leader only, so that replicas do not count twice).
func (a *Aggregator) observeNode(old, cur any) {
	if !a.leading.Load() {
		return
	}
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	slice := a.opts.grouping().Name(n)
	claimed := begun(o, n)
	if len(claimed) == 0 {
		return
	}
	a.mu.Lock()
	fits := a.claims.admit(n.Name, len(claimed), a.opts.Clock.Now())
	a.mu.Unlock()
	if refused := claimed[fits:]; len(refused) > 0 {
		pool := n.Labels[a.opts.PoolLabel]
		a.opts.Metrics.RefusedClaims.WithLabelValues(n.Name, pool).Add(float64(len(refused)))
		a.log.Warn("interruptions claimed past the hourly bound, not counted", "node", n.Name, "pool", pool, "refused", len(refused))
		a.nodeEvent(n.Name, n.UID, true, protocol.EventClaimsRefused, fmt.Sprintf(
			"The node's agent claims %d more interruption(s) (%s) than one node may add to its pool's counters in an hour (%d): not counted. A VM does not stop and come back that often; its agent is broken or compromised",
			len(refused), refused[0].Key(), MaxClaimsPerHour))
	}
	for _, i := range claimed[:fits] {
		a.opts.Metrics.PoolInterruption(n.Labels[a.opts.PoolLabel], i)
		if slice != "" && (i == protocol.ManualMaintenance || i == protocol.OpportunisticMaintenance) {
			// A voluntary maintenance of a slice is counted once, by the
			// host that asked for it, when Compute Engine begins it (the
			// other hosts' maintenance is that one, not counted again):
			// the slice's outage begins then, under the pool's reason.
			a.opts.Metrics.SliceInterruptions.WithLabelValues(slice, string(i.Type), string(i.Reason)).Inc()
		}
	}
}

// countVanished counts (the leader only) the Nodes that were deleted while
// NotReady and outside maintenance and have not come back within the
// window: a VM lost with nothing announced, which no agent can report.
func (a *Aggregator) countVanished() {
	a.mu.Lock()
	gone := a.ledger.vanished(a.opts.Clock.Now())
	a.claims.prune(a.opts.Clock.Now())
	a.mu.Unlock()
	for _, d := range gone {
		a.opts.Metrics.Vanished(d.name, d.pool, protocol.UnannouncedReboot)
		a.log.Warn("node vanished: deleted while NotReady and not created again", "node", d.name, "pool", d.pool)
	}
}

// countRecreated writes (the leader only) each repair on the Node that
// replaced the deleted one; the node's agent takes the counts into its
// counters.
func (a *Aggregator) countRecreated(ctx context.Context) {
	a.mu.Lock()
	pending := a.ledger.takeRecreated()
	a.mu.Unlock()
	for _, d := range pending {
		if err := a.writeRepair(ctx, d); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("count a recreated node", "node", d.name, "err", err)
			}
			a.mu.Lock()
			a.ledger.retry(d)
			a.mu.Unlock()
		}
	}
}

func (a *Aggregator) writeRepair(ctx context.Context, d deletedNode) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	obj, ok := shownNodes{a}.Get(d.name)
	cached, isNode := obj.(*corev1.Node)
	if !ok || !isNode {
		return nil // gone again: the next creation counts
	}
	n := cached.DeepCopy()
	r, ok := repairOf(n, d)
	if !ok {
		return nil
	}
	protocol.WriteRepairs(n, r)
	if err := a.writeNode(ctx, cached, n); err != nil {
		return err
	}
	a.opts.Metrics.PoolInterruption(n.Labels[a.opts.PoolLabel], protocol.Repair)
	a.nodeEvent(d.name, n.UID, true, protocol.EventRecreated, fmt.Sprintf(
		"The Node object was deleted and created again (UID %s, was %s), as node auto-repair does: counted as %s", n.UID, d.uid, protocol.Repair.Key()))
	return nil
}

// keptApprovals are the repairs the aggregator approved of Nodes deleted,
// by name, that a pool's repairRate under cfg still counts (the others are
// forgotten).
func (a *Aggregator) keptApprovals(cfg policy.Config) fleet.Kept {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ledger.kept(a.opts.Clock.Now(), func(pool string) time.Duration {
		// Kept for the pool's repairRate and for its cool-down, which
		// counts from the last approval (fleet.Node.LastApproved).
		s := cfg.Faults(pool)
		if s.RateCount > 0 {
			return max(s.RateWindow, s.Cooldown)
		}
		return s.Cooldown
	})
}
