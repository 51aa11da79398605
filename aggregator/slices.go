package aggregator

import (
	"context"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// inFlight bounds the API requests a pass makes at once (triggers, slice
// asks, reads of claims): a 64-host slice is asked, and a storm's hundreds
// of triggers written, in a few round trips each, within the API client's
// rate.
const inFlight = 16

// applySliceAsks writes every ask that differs from what its host carries
// (a forced maintenance is a cause once confirmed: confirm.go),
// up to inFlight at once, conditional on the host being as the pass saw it
// (a conflict is retried by the next pass), and counts a slice
// interruption when a slice is newly taken down.
func (a *Aggregator) applySliceAsks(ctx context.Context, nodes *fleet.Fleet, decidedOn map[string]*corev1.Node) {
	a.announceUnproven(nodes, decidedOn)
	a.confirmCauses(ctx, nodes, decidedOn)
	want := nodes.SliceAsks(a.opts.Clock.Now(), a.confirmedCause)
	if len(want) == 0 {
		return // no multi-host slice
	}
	down := map[string]bool{} // slices one host of which carries an ask
	for _, v := range nodes.All() {
		if v.Ask != nil {
			down[v.Slice] = true
		}
	}
	var names []string
	for name, ask := range want {
		v := nodes.Node(name)
		if !fleet.SameAsk(ask, v.Ask) || (ask != nil) != v.SliceTaint {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	written := a.updateNodes(ctx, names, decidedOn, "slice ask", func(name string, n *corev1.Node) { protocol.WriteSliceAsk(n, want[name]) })
	for i, name := range names {
		if !written[i] {
			continue
		}
		ask, v := want[name], nodes.Node(name)
		switch {
		case ask != nil && (v.Ask == nil || v.Ask.Cause != ask.Cause || !v.Ask.Started.Equal(ask.Started)):
			// One outage of a slice is one interruption, whatever its
			// cause becomes while the slice is down. A forced one is
			// counted when its ask is first written (its cause's
			// maintenance or preemption has begun); a voluntary one only
			// when Compute Engine begins it (countSliceBegun): its first
			// ask is the start of a drain that may be given up.
			if !down[ask.Slice] {
				down[ask.Slice] = true
				if i, ok := ask.Reason.Interruption(); ok && ask.Reason != protocol.ReasonManual {
					a.opts.Metrics.SliceInterruptions.WithLabelValues(ask.Slice, string(i.Type), string(i.Reason)).Inc()
				}
			}
			a.log.Info("slice taken down as one", "slice", ask.Slice, "node", name, "cause", ask.Cause, "reason", ask.Reason, "deadline", ask.Deadline)
			a.nodeEvent(name, v.UID, true, protocol.EventSliceMaintenance, fmt.Sprintf("Host %s of the multi-host slice %s stops (%s); every host of the slice drains with it, by %s",
				ask.Cause, ask.Slice, ask.Reason, ask.Deadline.Format(time.RFC3339)))
		case ask == nil && v.Ask != nil:
			a.log.Info("slice back in service", "slice", v.Ask.Slice, "node", name)
			a.nodeEvent(name, v.UID, false, protocol.EventSliceBack, fmt.Sprintf("Every host of the multi-host slice %s that stopped is back (%s was the cause); this host goes back in service", v.Ask.Slice, v.Ask.Cause))
		}
	}
}

// renameTaints gives the taints an earlier release wrote under an old key
// their key now (protocol.RenameTaints), one update per node, conditional
// on the node as the pass saw it. The pass reads the keys now only: a node
// no longer faulty, or of a slice no longer going down, loses the renamed
// taint on a later pass as any other.
func (a *Aggregator) renameTaints(ctx context.Context, decidedOn map[string]*corev1.Node) {
	var names []string
	for name, n := range decidedOn {
		if protocol.HasRenamedTaint(n) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, ok := range a.updateNodes(ctx, names, decidedOn, "renamed taint", func(_ string, n *corev1.Node) { protocol.RenameTaints(n) }) {
		if ok {
			a.log.Info("renamed a taint an earlier release wrote", "node", names[i])
		}
	}
}

// updateNodes writes change onto each of names (sorted), up to inFlight
// at once, each conditional on the node being as the pass saw it
// (decidedOn): a conflict, or another error (logged, what naming the
// write), is retried by the next pass. It says, name by name, which
// landed; none once leadership is lost.
func (a *Aggregator) updateNodes(ctx context.Context, names []string, decidedOn map[string]*corev1.Node, what string, change func(string, *corev1.Node)) []bool {
	written := make([]bool, len(names))
	var g errgroup.Group
	g.SetLimit(inFlight)
	for i, name := range names {
		g.Go(func() error {
			if ctx.Err() != nil || decidedOn[name] == nil {
				return nil // leadership lost
			}
			n := decidedOn[name].DeepCopy()
			change(name, n)
			if err := a.writeNode(ctx, decidedOn[name], n); err != nil {
				if !apierrors.IsConflict(err) {
					a.log.Warn(what+" not written", "node", name, "err", err)
				}
				a.refusals.write(name, decidedOn[name].ResourceVersion, err)
				a.poke()
				return nil
			}
			written[i] = true
			return nil
		})
	}
	_ = g.Wait()
	return written
}
