package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// A host of a multi-host slice follows its slice itself: the agent watches
// the Nodes of its own slice (read only; it still writes only its own Node
// and pods) and works out from their agents' states the ask the aggregator
// would write (lifecycle.SliceAsks), so that the slice goes down as one
// with no aggregator leading (a failover, or its node down). The
// aggregator's ask on the Node still counts: it covers what only a cluster
// view knows (a host whose agent is down, a cause whose Node was deleted).
// The host follows the earlier deadline of the two.

// sliceSyncWait bounds how long a step waits for the first list of a
// slice's Nodes it starts to watch; past it, the watch goes on listing,
// and the slice counts as not yet known (SliceUnknown) until it has.
const sliceSyncWait = 30 * time.Second

// followMembership keeps the watch of the node's multi-host slice in step
// with the Node, for the agent's life: read on every step, since what makes
// membership (the TPU chips the device plugin registers) may appear after
// the agent starts, vanish for a kubelet restart, and come back. A node
// whose slice cannot be told (protocol.SliceUnknown) keeps the slice it
// follows, so that a host mid-maintenance never leaves its slice for a
// chip count that is missing for a while.
func (a *Agent) followMembership(ctx context.Context, node *corev1.Node) {
	group := a.grouping().GroupOf(node)
	slice := group.Name
	if slice == a.slice || slice == "" && a.grouping().Unknown(node) != "" {
		return
	}
	if a.siblings != nil {
		a.stopSiblings()
		a.unneed(a.siblings)
		a.log.Info("no longer following the group", "group", a.slice)
	}
	a.slice, a.group, a.siblings, a.stopSiblings = slice, protocol.Group{}, nil, nil
	if slice == "" {
		return
	}
	a.group = group
	inf := kube.NewInformer(a.opts.Client.LabelledNodesListWatch(group.Label, group.Value), kube.InformerOptions{Name: "slice", Transform: slimNode, Logger: a.log.With("watch", "slice"), Clock: a.opts.Clock})
	// Only a change of what another host acts on wakes the agent
	// (SliceSignal): the other hosts write their Nodes for many other
	// reasons, and a slice of 64 hosts is 64 watchers of each write.
	inf.AddHandlers(kube.Handlers{
		Add: func(kube.Object) { a.poke() },
		Update: func(o, n kube.Object) {
			old, ok1 := o.(*corev1.Node)
			cur, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || lifecycle.SliceSignal(a.grouping().HostOf(old)) != lifecycle.SliceSignal(a.grouping().HostOf(cur)) {
				a.poke()
			}
		},
		Delete: func(kube.Object) { a.poke() },
	})
	wctx, stop := context.WithCancel(ctx)
	a.needs(inf)
	a.slice, a.siblings, a.stopSiblings = slice, inf, stop
	go inf.Run(wctx)
	synced, cancel := context.WithTimeout(wctx, sliceSyncWait)
	defer cancel()
	if cache.WaitForCacheSync(synced.Done(), inf.HasSynced) {
		a.log.Info("following the group", "group", slice, "kind", group.Kind, "nodes", len(inf.List()))
	} else {
		a.log.Warn("following the group; its Nodes are not listed yet", "group", slice, "kind", group.Kind)
	}
	a.poke() // step again with the slice
}

// grouping is what makes the node's group (protocol.Grouping).
func (a *Agent) grouping() protocol.Grouping {
	return protocol.Grouping{PoolLabel: a.opts.PoolLabel, SliceLabel: a.opts.SliceLabel, Reservation: a.opts.ReservationGroups}
}

// sliceHosts is every host of the slice as its watch has it, but node (the
// agent's own, as it reads it now), each with whether its membership is
// proven (protocol.Grouping.HostOf): a host that only claims to be one, by
// labels and capacity its own kubelet wrote, takes no other host down.
// Another host's forced maintenance (its preemption, its host maintenance)
// is its agent's word on its Node: the agent follows it only through the
// aggregator's ask, written once the aggregator confirmed it from Compute
// Engine (aggregator/confirm.go). Where the agents make their own Compute
// Engine calls (no Relay: --compute-caller node) every node's identity may
// stop any VM of the project, and a host's word is taken.
func (a *Agent) sliceHosts(node *corev1.Node) []protocol.SliceHost {
	g := a.grouping()
	own := g.HostOf(node)
	own.Ready = true // the agent runs
	hosts := []protocol.SliceHost{own}
	for _, o := range a.siblings.List() {
		if n, ok := o.(*corev1.Node); ok && n.Name != node.Name && g.Name(n) == a.slice {
			h := g.HostOf(n)
			h.Confirmed = a.opts.Relay == nil
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// sliceView is what a step at now knows of node's multi-host slice (st is
// the agent's state on it): the ask the agent follows (its own reading of
// its slice's hosts, or the aggregator's on the Node: FollowedAsk) and,
// for a voluntary maintenance of the slice, which host calls Compute
// Engine and which hosts still drain.
func (a *Agent) sliceView(node *corev1.Node, st lifecycle.State, now time.Time) lifecycle.SliceView {
	written, set := protocol.ReadSliceAsk(node)
	unknown := a.grouping().Unknown(node)
	switch {
	case a.siblings == nil:
		return lifecycle.SliceView{SliceAsk: written, SliceAskSet: set, SliceUnknown: unknown}
	case !a.siblings.HasSynced():
		return lifecycle.SliceView{SliceAsk: written, SliceAskSet: set, Slice: a.slice,
			SliceUnknown: fmt.Sprintf("the Nodes of its multi-host slice %s are not listed yet", a.slice)}
	}
	return lifecycle.SliceViewOf(lifecycle.SliceInput{Node: node.Name, State: st, Group: a.group, Hosts: a.sliceHosts(node),
		WantHosts: protocol.SliceHosts(node), Written: written, WrittenSet: set, Unknown: unknown, Now: now})
}
