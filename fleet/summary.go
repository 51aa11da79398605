package fleet

// What a pass reads of the fleet as a whole (the nodes in voluntary
// maintenance, those a fault's decision or a scan for a few nodes looks
// at), counted node by node as they are set: a pass over 65,000 nodes does
// not walk them all.

import "iter"

// Mark is a kind of node a pass looks for among many (Fleet.Marked).
type Mark uint8

const (
	// MarkAsked: the perform-maintenance label is on the node (Node.Asked).
	MarkAsked Mark = 1 << iota
	// MarkUnreadable: the node has values that cannot be read
	// (Node.Unreadable).
	MarkUnreadable
	// markSliceHost: the node is a host of a multi-host slice (Node.Slice).
	markSliceHost
	// markFault: the node may take part in the faults' decision
	// (faultRelevant).
	markFault
	// markGang: the node's agent lists pod groups, or the node carries a
	// gang's label (Node.PodGroups, Node.Gang).
	markGang
	// markBits is how many marks there are.
	markBits = iota
)

// marks are the marks n has.
func marks(n *Node) Mark {
	var m Mark
	if n.Asked {
		m |= MarkAsked
	}
	if len(n.Unreadable) > 0 {
		m |= MarkUnreadable
	}
	if n.Slice != "" {
		m |= markSliceHost
	}
	if faultRelevant(n) {
		m |= markFault
	}
	if len(n.PodGroups) > 0 || n.Gang != "" {
		m |= markGang
	}
	return m
}

// The counts are kept node by node: each node's part is added when it is
// set or amended and taken away before, so that a pass's work on them is
// for what changed. A pool counts its nodes by mark (fleetPool.marked);
// the fleet counts its nodes in voluntary maintenance (Fleet.voluntaryNodes,
// those of no slice, and sliceHosts, by slice).

// hostCount is a slice's proven hosts and those of them in voluntary
// maintenance, and its unproven hosts in voluntary maintenance (alone:
// each counts only itself).
type hostCount struct{ hosts, voluntary, alone int }

// count adds n's part to its pool's counts and the fleet's (sign 1), or
// takes it away (-1).
func (f *Fleet) count(p *fleetPool, n *Node, sign int) {
	m := marks(n)
	for bit := range p.marked {
		if m&(1<<bit) != 0 {
			p.marked[bit] += sign
		}
	}
	if n.Slice == "" {
		if n.Voluntary {
			f.voluntaryNodes += sign
		}
		return
	}
	if f.sliceHosts == nil {
		f.sliceHosts = map[string]hostCount{}
	}
	c := f.sliceHosts[n.Slice]
	switch {
	case n.SliceUnproven && n.Voluntary:
		c.alone += sign
	case n.SliceUnproven:
	case n.Voluntary:
		c.hosts += sign
		c.voluntary += sign
	default:
		c.hosts += sign
	}
	if c == (hostCount{}) {
		delete(f.sliceHosts, n.Slice)
		return
	}
	f.sliceHosts[n.Slice] = c
}

// has: a node of the pool has the mark m.
func (p *fleetPool) has(m Mark) bool {
	for bit, k := range p.marked {
		if m&(1<<bit) != 0 && k > 0 {
			return true
		}
	}
	return false
}

// voluntary counts the nodes in voluntary maintenance, as countVoluntary
// over every node: a slice one proven host of which is in it counts every
// proven host.
func (f *Fleet) voluntary() int {
	n := f.voluntaryNodes
	for _, c := range f.sliceHosts {
		n += c.alone
		if c.voluntary > 0 {
			n += c.hosts
		}
	}
	return n
}

// Marked is every node that has the mark m, by pool and name: the nodes of
// the pools none of whose nodes has it are not looked at. Set, Delete,
// Amend and Restore are not to be called while it runs.
func (f *Fleet) Marked(m Mark) iter.Seq[*Node] {
	return func(yield func(*Node) bool) {
		for _, name := range f.markedPools(m) {
			for _, n := range f.pools[name].members() {
				if marks(n)&m != 0 && !yield(n) {
					return
				}
			}
		}
	}
}

// markedPools are the names of the pools a node of which has the mark m,
// sorted.
func (f *Fleet) markedPools(m Mark) []string {
	var out []string
	for _, name := range f.poolNames() {
		if f.pools[name].has(m) {
			out = append(out, name)
		}
	}
	return out
}
