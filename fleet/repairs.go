package fleet

// The order in which a pool's faulty nodes take its places (queue), and
// what its repairRate counts (repairsCounted): only what the aggregator
// itself approved, never a node's word.

import (
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// queue orders a pool's faults for its places: a person's requests
// first; then the nodes whose VM the aggregator approved a repair of least
// recently (never first), so that a node faulty again and again, on its
// own word or not, cannot keep the others waiting; then the oldest fault;
// then by name.
func queue(a, b Fault) int {
	pa, pb := a.Approval.Source == protocol.FaultSourcePerson, b.Approval.Source == protocol.FaultSourcePerson
	switch {
	case pa != pb && pa:
		return -1
	case pa != pb:
		return 1
	}
	if c := a.LastApproved.Compare(b.LastApproved); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	return strings.Compare(a.Node, b.Node)
}

// LastApproved is when the aggregator last approved a repair of n's VM,
// in any pool (zero: never, as far as its records go).
func (n *Node) LastApproved() time.Time {
	var last time.Time
	for _, at := range n.Approved {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// repairsCounted is, for each of pools with a repairRate, how many
// repairs it counts now: only what the aggregator itself approved. A node
// counts against a pool (once, however many times it was repaired there
// within the window) when
//   - the aggregator approved a repair of its VM in that pool within the
//     pool's window (its record on the Node, Node.Approved, or kept
//     from a Node deleted, kept): against the pool where the repair was
//     approved, whatever pool the Node names now, so that a node that
//     registers again under another pool's label neither empties its
//     pool's count nor fills the other's;
//   - or, in its own pool, it is in repair or claimed (a deposed
//     leader's approval may still land, as maxInRepair counts them).
//
// What the node's agent says of its last repair (Node.LastRepair) is
// never counted: an agent that writes a repair ending "now" again and
// again would hold a place of its pool's for ever.
func repairsCounted(now time.Time, cfg policy.Config, pools []string, byPool func(string) []*Node, kept Kept) map[string]int {
	window := make(map[string]time.Duration, len(pools))
	for _, pool := range pools {
		if s := cfg.Faults(pool); s.RateCount > 0 {
			window[pool] = s.RateWindow
		}
	}
	counted := map[string]map[string]bool{}
	count := func(pool, node string) {
		if counted[pool] == nil {
			counted[pool] = map[string]bool{}
		}
		counted[pool][node] = true
	}
	approvals := func(node string, approved map[string]time.Time) {
		for pool, at := range approved {
			if w, ok := window[pool]; ok && now.Sub(at) < w {
				count(pool, node)
			}
		}
	}
	for _, pool := range pools {
		for _, n := range byPool(pool) {
			if _, ok := window[pool]; ok && (n.InRepair() || n.Claimed) {
				count(pool, n.Name)
			}
			approvals(n.Name, n.Approved)
		}
	}
	for node, approved := range kept {
		approvals(node, approved)
	}
	used := make(map[string]int, len(counted))
	for pool, nodes := range counted {
		used[pool] = len(nodes)
	}
	return used
}

// BelievableRepair: last is a repair that ended (it has an outcome) no
// later than now. The agent writes how its node's last repair ended; one
// that ends in the future is not believed (the aggregator says so as of
// an unreadable key).
func BelievableRepair(last protocol.LastFaultRepair, now time.Time) bool {
	return last.Outcome != "" && !last.Ended.After(now)
}
