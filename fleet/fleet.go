package fleet

// The fleet kept from pass to pass: a pass decides again only the pools
// whose nodes changed, so that over 65,000 nodes it does work for what
// changed, not for the fleet.

import (
	"cmp"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/maintenance-handler/maintenance-handler/policy"
)

// Fleet is every node a pass decides about, by pool, with each pool's
// last plan. Set and Delete tell it what changed; Decide is Decide over
// every node, but reuses the plan of a pool none of whose nodes changed
// while nothing else it read has moved: the configuration, what the
// pool's turn found left of the cluster's cap (in the range its takes
// allow), the windows and exclusions, and now (before the first moment a
// comparison of now that the plan made turns). The zero Fleet is empty.
//
// Concurrency: not safe for concurrent use.
type Fleet struct {
	nodes map[string]*Node
	pools map[string]*fleetPool
	// names is every pool, sorted, and all every node by pool and name;
	// nil when a node or a pool came or went.
	names []string
	all   []*Node
	// amended holds the nodes Amend changed, as Set gave them.
	amended map[string]Node
	cfg     *policy.Config
	// fresh are the plans the last Decide made anew, and replaced the
	// plans they replaced and those of pools gone since the Decide before.
	fresh, replaced []PoolPlan
	gone            []PoolPlan // the plans of pools gone since the last Decide
	// voluntaryNodes counts the nodes of no slice in voluntary
	// maintenance, and sliceHosts each slice's hosts (summary.go).
	voluntaryNodes int
	sliceHosts     map[string]hostCount
}

// planIDs names the plans the Fleets make (PoolPlan.ID): unique in the
// process, so that a plan of a new Fleet never takes the name of one told
// before.
var planIDs atomic.Uint64

// fleetPool is one pool's nodes and its last plan.
type fleetPool struct {
	set     map[string]*Node
	sorted  []*Node // by name; nil when a node came or went
	changed bool    // a node came, went or changed since plan
	plan    *poolMemo
	// kept is what its last decision found of its nodes, sorted.
	kept eligibilities
	// marked counts its nodes by Mark's bit (summary.go).
	marked [markBits]int
}

// poolMemo is a pool's plan, and what it holds for (see Fleet).
type poolMemo struct {
	plan               PoolPlan
	took               int // of the cluster's cap
	lo, hi             int // what the pool's turn may find left of it
	until              time.Time
	readBlock          bool
	block, blockDetail string
}

// Set puts n in the fleet, or replaces the node of its name (its pool may
// change). The fleet keeps its own copy.
func (f *Fleet) Set(n Node) {
	if f.nodes == nil {
		f.nodes, f.pools = map[string]*Node{}, map[string]*fleetPool{}
	}
	delete(f.amended, n.Name)
	cur, ok := f.nodes[n.Name]
	if ok && cur.Pool == n.Pool {
		p := f.pools[n.Pool]
		f.count(p, cur, -1)
		*cur = n
		f.count(p, cur, 1)
		p.touch(n.Name)
		return
	}
	if ok {
		f.leave(cur)
		*cur = n
	} else {
		cur = &n
		f.nodes[n.Name] = cur
	}
	f.all = nil
	p := f.pools[n.Pool]
	if p == nil {
		p = &fleetPool{set: map[string]*Node{}}
		f.pools[n.Pool] = p
		f.names = nil
	}
	p.set[n.Name], p.sorted = cur, nil
	f.count(p, cur, 1)
	p.touch(n.Name)
}

// Delete takes the node of name out of the fleet, if it is there.
func (f *Fleet) Delete(name string) {
	if n, ok := f.nodes[name]; ok {
		f.leave(n)
		delete(f.nodes, name)
		delete(f.amended, name)
		f.all = nil
	}
}

// leave takes n out of its pool, and the pool out of the fleet when it
// was its last node.
func (f *Fleet) leave(n *Node) {
	p := f.pools[n.Pool]
	f.count(p, n, -1)
	delete(p.set, n.Name)
	p.sorted = nil
	p.touch(n.Name)
	if len(p.set) == 0 {
		if p.plan != nil {
			f.gone = append(f.gone, p.plan.plan)
		}
		delete(f.pools, n.Pool)
		f.names = nil
	}
}

// Node is the node of name (nil when it is not in the fleet). It is the
// fleet's: change it only through Set or Amend.
func (f *Fleet) Node(name string) *Node { return f.nodes[name] }

// Len is how many nodes the fleet has.
func (f *Fleet) Len() int { return len(f.nodes) }

// Amend changes the node of name (if it is in the fleet) for the pass
// under way alone, with what the pass knows beyond its Node object (a
// claim, a fault's decision): Restore puts back what Set gave.
// change is not to move it to another pool.
func (f *Fleet) Amend(name string, change func(*Node)) {
	n, ok := f.nodes[name]
	if !ok {
		return
	}
	if f.amended == nil {
		f.amended = map[string]Node{}
	}
	if _, ok := f.amended[name]; !ok {
		f.amended[name] = *n
	}
	p := f.pools[n.Pool]
	f.count(p, n, -1)
	change(n)
	f.count(p, n, 1)
	p.touch(name)
}

// Restore undoes every Amend since the last Restore.
func (f *Fleet) Restore() {
	for name, n := range f.amended {
		cur, p := f.nodes[name], f.pools[n.Pool]
		f.count(p, cur, -1)
		*cur = n
		f.count(p, cur, 1)
		p.touch(name)
	}
	clear(f.amended)
}

// All is every node, by pool and by name; it is valid until the next Set
// or Delete of a new or gone node, and is not to be changed.
func (f *Fleet) All() []*Node {
	if f.all == nil {
		f.all = make([]*Node, 0, len(f.nodes))
		for _, name := range f.poolNames() {
			f.all = append(f.all, f.pools[name].members()...)
		}
	}
	return f.all
}

func (f *Fleet) poolNames() []string {
	if f.names == nil {
		f.names = make([]string, 0, len(f.pools))
		for name := range f.pools {
			f.names = append(f.names, name)
		}
		sort.Strings(f.names)
	}
	return f.names
}

// touch: the node of name came to the pool, went or changed.
func (p *fleetPool) touch(name string) {
	p.changed = true
	if i, ok := slices.BinarySearchFunc(p.sorted, name, func(n *Node, name string) int { return cmp.Compare(n.Name, name) }); ok {
		p.kept.forget(i)
	}
}

// members are the pool's nodes by name.
func (p *fleetPool) members() []*Node {
	if p.sorted == nil {
		p.kept.nodes = p.kept.nodes[:0] // each found of the node then at its place
		p.sorted = make([]*Node, 0, len(p.set))
		for _, n := range p.set {
			p.sorted = append(p.sorted, n)
		}
		slices.SortFunc(p.sorted, func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	}
	return p.sorted
}

// Changes are the plans the last Decide made anew (those of pools that
// changed, or whose plan no longer held; the others' were reused), and the
// plans they replaced with those of the pools gone since the Decide
// before: an announcement of what changed reads these alone.
func (f *Fleet) Changes() (fresh, replaced []PoolPlan) { return f.fresh, f.replaced }

// Decide is Decide(now, cfg, every node): the plans of every pool, by
// name. A plan is only read.
func (f *Fleet) Decide(now time.Time, cfg policy.Config) []PoolPlan {
	// The policy changed unless its source says it is the one of the last
	// Decide (policy.Config.Version).
	sameCfg := f.cfg != nil && cfg.Version != "" && f.cfg.Version == cfg.Version
	f.cfg = &cfg
	f.fresh, f.replaced = f.fresh[:0], append(f.replaced[:0], f.gone...)
	f.gone = f.gone[:0]
	clusterLeft := cfg.ClusterBudget().Of(len(f.nodes)) - f.voluntary()
	plans := make([]PoolPlan, 0, len(f.pools))
	for _, name := range f.poolNames() {
		p := f.pools[name]
		if m := p.plan; sameCfg && !p.changed && m.holds(now, cfg, clusterLeft) {
			clusterLeft -= m.took
			plans = append(plans, m.plan)
			continue
		}
		if p.plan != nil {
			f.replaced = append(f.replaced, p.plan.plan)
		}
		in := clusterLeft
		pass := decidePool(now, cfg, name, p.members(), &clusterLeft, &p.kept)
		changed, dropped, known := p.kept.changes(p.sorted)
		pass.plan.ID = planIDs.Add(1)
		if known { // the pool had a plan, made with these nodes
			pass.plan.Since, pass.plan.Changed, pass.plan.Dropped = p.plan.plan.ID, changed, dropped
		}
		p.plan = &poolMemo{plan: pass.plan, took: in - clusterLeft, lo: pass.caps.lo, hi: pass.caps.hi, until: pass.until,
			readBlock: pass.readBlock, block: pass.block, blockDetail: pass.blockDetail}
		p.changed = false
		f.fresh = append(f.fresh, pass.plan)
		plans = append(plans, pass.plan)
	}
	return plans
}

// holds: the plan is the one a pass would decide now, with clusterLeft
// left of the cluster's cap at the pool's turn (the pool's nodes and the
// configuration the same).
func (m *poolMemo) holds(now time.Time, cfg policy.Config, clusterLeft int) bool {
	if m == nil || clusterLeft < m.lo || clusterLeft > m.hi || !m.until.IsZero() && !now.Before(m.until) {
		return false
	}
	if m.readBlock {
		block, detail := cfg.Policy(m.plan.Pool).Blocks(now)
		return block == m.block && detail == m.blockDetail
	}
	return true
}
