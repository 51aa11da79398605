package fleet

// Multi-host slices in the fleet's decision: a slice is picked whole or
// not at all, and every host of a slice that goes down carries the ask to
// drain with it.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// sliceMembers groups the nodes of multi-host TPU slices, by slice.
func sliceMembers(nodes []*Node) [][]*Node {
	if !slices.ContainsFunc(nodes, func(n *Node) bool { return n.Slice != "" }) {
		return nil
	}
	bySlice := map[string][]*Node{}
	var names []string
	for _, n := range nodes {
		if n.Slice == "" {
			continue
		}
		if _, ok := bySlice[n.Slice]; !ok {
			names = append(names, n.Slice)
		}
		bySlice[n.Slice] = append(bySlice[n.Slice], n)
	}
	sort.Strings(names)
	out := make([][]*Node, 0, len(names))
	for _, s := range names {
		out = append(out, bySlice[s])
	}
	return out
}

// decideSlice takes a slice whole or not at all: every host must be
// eligible and out of maintenance, and the slice takes as many nodes of
// min-nodes' spare and of the pool's and the cluster's caps as it has
// hosts. Only its first host by name is triggered: its agent asks Compute
// Engine once, for the whole slice, after every other host, following
// it, is drained (lifecycle.SliceCaller).
func (p *poolPass) decideSlice(members []*Node) {
	var blocked []string
	for _, n := range members {
		if n.InMaintenance || n.Voluntary {
			return // the slice is down, or going down: nothing to decide
		}
	}
	for _, n := range members {
		if !pending(n) {
			blocked = append(blocked, n.Name+" has no pending maintenance")
			continue
		}
		if reason, detail := p.eligible(n); reason != "" {
			p.skip(n, reason, detail)
			blocked = append(blocked, n.Name+": "+string(reason))
		}
	}
	slice := members[0].Slice
	noun := map[protocol.GroupKind]string{protocol.GroupReservation: "reservation group", protocol.GroupGang: "gang"}[members[0].GroupKind]
	if noun == "" {
		noun = "multi-host TPU slice"
	}
	if len(blocked) > 0 {
		for _, n := range members {
			if pending(n) {
				if r, _ := p.eligible(n); r == "" {
					p.skip(n, ReasonSliceIncomplete, func() string {
						return fmt.Sprintf("the %s %s is maintained whole, and not every node of it can go now (%s)", noun, slice, strings.Join(blocked, "; "))
					})
				}
			}
		}
		return
	}
	if reason, detail := p.caps.take(len(members)); reason != "" {
		for _, n := range members {
			p.skip(n, reason, func() string {
				return fmt.Sprintf("the %s %s goes down whole, %d nodes, and %s", noun, slice, len(members), detail())
			})
		}
		return
	}
	lead := members[0] // sorted by name
	hosts := len(members)
	p.trigger(lead, func() string {
		return fmt.Sprintf("Picked for opportunistic maintenance with the whole %s %s (%d nodes, all idle): this host asks Compute Engine once for the group, after every host of it is drained", noun, slice, hosts)
	})
}

// Confirmed says whether the aggregator confirmed, from what the node
// cannot write, the forced maintenance (reason, started at started) its
// agent says the node named name has under way (lifecycle.ConfirmsCause).
type Confirmed func(name string, reason protocol.Reason, started time.Time) bool

// SliceAsks is what every host of every multi-host slice must carry
// (lifecycle.SliceAsks, slice by slice). The result names every host of
// every slice (nil: no ask). A host's forced maintenance is a cause only
// where confirmed says so, or where an ask for it stands on a host of its
// slice (the aggregator's own key: a leader confirmed it before). A slice
// that is short of hosts (fewer Nodes than its topology holds) because its
// cause's Node was deleted, as a repair does before it recreates the VM,
// is not back: its hosts keep the ask they carry, up to
// lifecycle.SliceDrainLimit after its cause started.
func SliceAsks(nodes []Node, now time.Time, confirmed Confirmed) map[string]*protocol.SliceAsk {
	all := make([]*Node, len(nodes))
	for i := range nodes {
		all[i] = &nodes[i]
	}
	return sliceAsks(all, now, confirmed)
}

// SliceAsks is SliceAsks over the fleet's nodes.
func (f *Fleet) SliceAsks(now time.Time, confirmed Confirmed) map[string]*protocol.SliceAsk {
	return sliceAsks(slices.Collect(f.Marked(markSliceHost)), now, confirmed)
}

// askedFor: an ask for n's maintenance under way (its cause and start)
// stands on one of members.
func askedFor(n *Node, members []*Node) bool {
	return slices.ContainsFunc(members, func(m *Node) bool {
		return m.Ask != nil && m.Ask.Slice == n.Slice && m.Ask.Cause == n.Name && m.Ask.Reason == n.Reason && m.Ask.Started.Equal(n.Started)
	})
}

func sliceAsks(nodes []*Node, now time.Time, confirmed Confirmed) map[string]*protocol.SliceAsk {
	bySlice := map[string][]*Node{}
	for _, n := range nodes {
		if n.Slice != "" {
			bySlice[n.Slice] = append(bySlice[n.Slice], n)
		}
	}
	out := map[string]*protocol.SliceAsk{}
	for slice, members := range bySlice {
		hosts := make([]protocol.SliceHost, 0, len(members))
		for _, n := range members {
			hosts = append(hosts, protocol.SliceHost{Name: n.Name, Phase: n.Phase, Reason: n.Reason, Started: n.Started, Deadline: n.Deadline, Unproven: n.SliceUnproven,
				Asked: n.ManualAsked, AskedUntil: n.ManualAskedUntil, Confirmed: confirmed(n.Name, n.Reason, n.Started) || askedFor(n, members)})
		}
		asks := lifecycle.SliceAsks(slice, members[0].GroupKind, hosts, now)
		if kept := keptAsk(members, now); kept != nil && !anyAsk(asks) {
			for _, n := range members {
				asks[n.Name] = kept
			}
		}
		maps.Copy(out, asks)
	}
	return out
}

func anyAsk(asks map[string]*protocol.SliceAsk) bool {
	for _, a := range asks {
		if a != nil {
			return true
		}
	}
	return false
}

// keptAsk is the ask a slice's hosts keep while its cause's Node is gone
// (see SliceAsks); nil for none.
func keptAsk(members []*Node, now time.Time) *protocol.SliceAsk {
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	// Only proven hosts say how many hosts the slice has, and fill a
	// host's place: a node labelled in keeps no real host's place.
	want, proven := 0, 0
	for _, n := range members {
		if !n.SliceUnproven {
			want = cmp.Or(want, n.SliceHosts)
			proven++
		}
	}
	if want == 0 || proven >= want {
		return nil
	}
	for _, n := range members {
		// Only an ask for this slice: a host's annotation is its agent's to
		// write, and names no other slice for the aggregator.
		if n.Ask == nil || n.Ask.Slice != n.Slice || !now.Before(n.Ask.Started.Add(lifecycle.SliceDrainLimit)) || n.Ask.Started.After(now.Add(lifecycle.ClockSkew)) {
			continue
		}
		if !slices.ContainsFunc(members, func(m *Node) bool { return m.Name == n.Ask.Cause }) {
			return n.Ask
		}
	}
	return nil
}

func SameAsk(a, b *protocol.SliceAsk) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Slice == b.Slice && a.Cause == b.Cause && a.Reason == b.Reason && a.Started.Equal(b.Started) && a.Deadline.Equal(b.Deadline)
}
