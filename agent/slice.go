package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

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

// watchSlice starts, where the node is a host of a multi-host slice, one
// watch of the slice's Nodes and waits for it. Membership is read once,
// at start: the labels that make it are set when the node is created.
func (a *Agent) watchSlice(ctx context.Context) error {
	node, err := a.cachedNode()
	if err != nil {
		return err
	}
	slice := protocol.SliceOf(node, a.opts.PoolLabel, a.opts.SliceLabel)
	if slice == "" {
		return nil
	}
	key := a.opts.SliceLabel
	if key == "" {
		key = a.opts.PoolLabel
	}
	inf := kube.NewInformer(a.opts.Client.LabelledNodesListWatch(key, slice), kube.InformerOptions{Name: "slice", Transform: slimNode, Logger: a.log.With("watch", "slice"), Clock: a.opts.Clock})
	// Only a change of what another host acts on wakes the agent
	// (SliceSignal): the other hosts write their Nodes for many other
	// reasons, and a slice of 64 hosts is 64 watchers of each write.
	inf.AddHandlers(kube.Handlers{
		Add: func(kube.Object) { a.poke() },
		Update: func(o, n kube.Object) {
			old, ok1 := o.(*corev1.Node)
			cur, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || lifecycle.SliceSignal(protocol.SliceHostOf(old)) != lifecycle.SliceSignal(protocol.SliceHostOf(cur)) {
				a.poke()
			}
		},
		Delete: func(kube.Object) { a.poke() },
	})
	a.needs(inf)
	if err := inf.Start(ctx); err != nil {
		return fmt.Errorf("watch the slice %q of node %q: %w", slice, a.opts.NodeName, err)
	}
	a.slice, a.siblings = slice, inf
	a.log.Info("following the multi-host slice", "slice", slice, "hosts", len(inf.List()))
	return nil
}

// sliceHosts is every host of the slice as its watch has it, but node (the
// agent's own, as it reads it now).
func (a *Agent) sliceHosts(node *corev1.Node) []protocol.SliceHost {
	own := protocol.SliceHostOf(node)
	own.Ready = true // the agent runs
	hosts := []protocol.SliceHost{own}
	for _, o := range a.siblings.List() {
		if n, ok := o.(*corev1.Node); ok && n.Name != node.Name && protocol.SliceOf(n, a.opts.PoolLabel, a.opts.SliceLabel) == a.slice {
			hosts = append(hosts, protocol.SliceHostOf(n))
		}
	}
	return hosts
}

// observeSlice fills what obs knows of node's multi-host slice (st is the
// agent's state on it): the ask
// the agent follows (its own reading of its slice's hosts, or the
// aggregator's on the Node: FollowedAsk) and, for a voluntary maintenance
// of the slice, which host calls Compute Engine and which hosts still
// drain.
func (a *Agent) observeSlice(node *corev1.Node, st lifecycle.State, obs *lifecycle.Observation) {
	written, set := protocol.ReadSliceAsk(node)
	if a.siblings == nil {
		obs.SliceAsk, obs.SliceAskSet = written, set
		return
	}
	hosts := a.sliceHosts(node)
	obs.Slice = a.slice
	obs.SliceAsk, obs.SliceAskSet = lifecycle.FollowedAsk(lifecycle.SliceAsks(a.slice, hosts)[node.Name], written, set, hosts)
	if !obs.SliceAskSet && st.Active() && st.Reason == protocol.ReasonSlice {
		if want := protocol.SliceHosts(node); len(hosts) < want {
			// A host of the slice is gone (its Node deleted, as a repair
			// does before it recreates it): the slice is not back.
			obs.SliceAsk, obs.SliceAskSet = protocol.SliceAsk{Slice: a.slice, Cause: fmt.Sprintf("(%d of its %d hosts are in the cluster)", len(hosts), want),
				Reason: protocol.ReasonSlice, Started: st.Started, Deadline: st.Deadline}, true
		}
	}
	caller := lifecycle.SliceCaller(hosts)
	obs.SliceVoluntary, obs.SliceCaller = caller != "", caller == node.Name
	obs.SliceWaiting, obs.SliceIncomplete = lifecycle.SliceDrained(hosts, caller)
}
