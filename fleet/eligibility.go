package fleet

// What a pool's decision found of each of its nodes, kept from pass to
// pass: after 1% of 65,000 nodes changed, spread over the fleet, nearly
// every pool is decided again, and each of its nodes but the one that
// changed is found as it was. The pool's decision reads what it kept, in
// one array by node, not the nodes themselves: a pass that decides 650
// pools again then reads 65,000 nodes' entries in order, not 65,000 Node
// structs strewn over the heap.

import (
	"slices"
	"time"
)

// eligibilities are what a pool's last decision found of its nodes, by
// its nodes in name order: what each node alone says (facts), kept while
// the node did not change (Fleet forgets it then), and its eligibility,
// kept while, besides, what it read of the pool (key) is the same and now
// is before its until.
type eligibilities struct {
	key   eligibilityKey
	nodes []eligibility
	// decided: each node's last is the reason of its decision in the
	// pool's last plan (eligibility.last).
	decided bool
}

// eligibilityKey is what poolPass.eligible reads of the pool.
type eligibilityKey struct {
	window, idleTime   time.Duration
	fromPolicy         bool
	block, blockDetail string
}

// eligibility is what a pool's decision found of one node: its facts,
// and whether it has nothing to decide (not pending, or in maintenance),
// is skipped (skip, and why) or is a candidate the caps may take (skip
// names it, and the caps give the reason); until is when time alone may
// change that (zero: never).
type eligibility struct {
	known bool // facts
	facts nodeFacts
	state eligibilityState
	skip  Decision
	until time.Time
	// reason is the reason of the node's decision in the plan under way
	// ("" for none), at decision in its Decisions; last, in the pool's
	// last plan.
	reason, last Reason
	decision     int
}

// nodeFacts is what a pool's gauges, setting and decision read of a node.
type nodeFacts struct {
	windowStart time.Time // of its notice
	idleSince   time.Time
	// config is its opportunistic-config annotation where GKE's handler
	// does not act on it ("" else).
	config string
	// available: Ready and out of maintenance.
	available, inMaintenance, voluntary, idle, pending bool
	sliceHost, grouped                                 bool
	// leftToGKE: GKE's handler acts on its opportunistic-config
	// annotation.
	leftToGKE bool
}

type eligibilityState uint8

const (
	eligibilityUnknown eligibilityState = iota // not found yet, or forgotten
	eligibilityNone
	eligibilitySkip
	eligibilityCandidate
)

// forget drops what was found of the node at i of the pool's nodes.
func (e *eligibilities) forget(i int) {
	if i < len(e.nodes) {
		e.nodes[i] = eligibility{last: e.nodes[i].last}
	}
}

// fit keeps what was found for a pool of n nodes, or drops it all when it
// was found for another set of nodes.
func (e *eligibilities) fit(n int) {
	if len(e.nodes) != n {
		e.nodes = slices.Grow(e.nodes[:0], n)[:n]
		clear(e.nodes)
		e.decided = false
	}
}

// changes notes the plan's decisions as the pool's last, and says how
// they differ from the last plan's: the decisions (indexes into
// plan.Decisions, in order) new or of another reason, and the nodes
// decided about no more. known is false where the last plan's are not
// known (the pool's first plan, or one after its nodes came or went).
func (e *eligibilities) changes(nodes []*Node) (changed []int, dropped []string, known bool) {
	for i := range e.nodes {
		n := &e.nodes[i]
		if n.reason == n.last {
			continue
		}
		if n.reason != "" {
			changed = append(changed, n.decision)
		} else {
			dropped = append(dropped, nodes[i].Name)
		}
		n.last = n.reason
	}
	slices.Sort(changed)
	known, e.decided = e.decided, true
	return changed, dropped, known
}

// use keeps the eligibilities for a decision that reads key: those found
// for another key are dropped (the facts are kept).
func (e *eligibilities) use(key eligibilityKey) {
	if e.key == key {
		return
	}
	e.key = key
	for i := range e.nodes {
		e.nodes[i].state = eligibilityUnknown
	}
}

// factsOf are the facts of n, the node at i of the pool's nodes.
func (e *eligibilities) factsOf(i int, n *Node) *nodeFacts {
	found := &e.nodes[i]
	if !found.known {
		pending := pending(n)
		found.known, found.facts = true, nodeFacts{
			config: n.Config, available: n.Ready && !n.InMaintenance, inMaintenance: n.InMaintenance, voluntary: n.Voluntary,
			idle: !n.IdleSince.IsZero() && n.Busy == "", pending: pending, sliceHost: n.Slice != "", grouped: n.AutoscalerGroup != "",
			leftToGKE: n.GKEHandled && n.Config != ""}
		if pending {
			found.facts.windowStart = n.Notice.WindowStart
		}
		found.facts.idleSince = n.IdleSince
		if n.GKEHandled {
			found.facts.config = ""
		}
	}
	return &found.facts
}

// poolSummary is what a pool's decision reads of its nodes together.
type poolSummary struct {
	// available: Ready and out of maintenance; voluntary: in voluntary
	// maintenance (countVoluntary).
	available, voluntary int
	// configs are the distinct values of its nodes' opportunistic-config
	// annotation (nodeFacts.config).
	configs             []string
	sliceHosts, grouped bool
}

// summarize fills the pool's gauges from its nodes' facts, and sums up
// what its decision reads of them.
func (p *poolPass) summarize() poolSummary {
	var s poolSummary
	for i, n := range p.nodes {
		p.kept.nodes[i].reason = ""
		f := p.kept.factsOf(i, n)
		if f.available {
			s.available++
		}
		if f.voluntary {
			s.voluntary++
		}
		if f.inMaintenance {
			p.plan.InMaintenance++
		}
		if f.idle {
			p.plan.Idle++
		}
		if f.pending && !f.inMaintenance {
			p.plan.Pending++
			if p.plan.NextMaintenance.IsZero() || f.windowStart.Before(p.plan.NextMaintenance) {
				p.plan.NextMaintenance = f.windowStart
			}
		}
		if f.config != "" && !slices.Contains(s.configs, f.config) {
			s.configs = append(s.configs, f.config)
		}
		s.sliceHosts, s.grouped = s.sliceHosts || f.sliceHost, s.grouped || f.grouped
	}
	if s.sliceHosts { // a slice one host of which is in voluntary maintenance counts every host
		s.voluntary = countVoluntary(p.nodes)
	}
	return s
}

// eligibility is what the pass finds of the node at i of its nodes: kept
// from an earlier pass where it holds (an idle time too short says how
// long the node has been idle now), else found now, and kept.
func (p *poolPass) eligibility(i int, n *Node) *eligibility {
	e := &p.kept.nodes[i]
	if e.state != eligibilityUnknown && (e.until.IsZero() || p.now.Before(e.until)) {
		p.turnsAt(e.until)
		if e.state == eligibilitySkip && e.skip.Reason == ReasonIdleTooShort {
			p.found = *e
			p.found.skip.message = p.idleTooShort(e.facts.idleSince)
			return &p.found
		}
		return e
	}
	e.state, e.until = eligibilityNone, time.Time{}
	if f := p.kept.factsOf(i, n); !f.pending || f.inMaintenance {
		return e
	}
	outer := p.until
	p.until = time.Time{}
	reason, detail := p.eligible(n)
	e.until, p.until = p.until, outer
	p.turnsAt(e.until)
	e.state, e.skip = eligibilityCandidate, Decision{Node: n.Name, UID: n.UID} // the caps decide
	if reason != "" {
		e.state, e.skip = eligibilitySkip, Decision{Node: n.Name, UID: n.UID, Reason: reason, message: detail, skipped: true}
	}
	return e
}
