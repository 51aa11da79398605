package aggregator

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// SliceTriggers are the hosts whose pending maintenance is taken with
// their slice's: where a host of a multi-host slice is in a maintenance a
// person asked for by the perform-maintenance label (not an opportunistic
// trigger, which takes the whole slice already), every other host that is
// Ready, in service and not asked, with a pending notice that can be
// rescheduled, is asked too (by cause, the first such host by name).
func SliceTriggers(nodes []Node) map[string]string {
	bySlice := map[string][]Node{}
	for _, n := range nodes {
		if n.Slice != "" {
			bySlice[n.Slice] = append(bySlice[n.Slice], n)
		}
	}
	out := map[string]string{}
	for _, members := range bySlice {
		sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
		// A host whose agent accepted a person's label: its maintenance
		// is under way, so the asks go out with the labels, and a host
		// that refuses its label drains with the slice instead of being
		// asked again.
		cause := ""
		for _, n := range members {
			if n.Asked && !n.Triggered && active(n) && n.Reason == protocol.ReasonManual {
				cause = n.Name
				break
			}
		}
		if cause == "" {
			continue
		}
		for _, n := range members {
			if !n.Asked && !n.InMaintenance && !active(n) && n.Ready && pending(n) && n.Notice.CanReschedule {
				out[n.Name] = cause
			}
		}
	}
	return out
}

// SliceAsks is what every host of every multi-host slice must carry
// (protocol.SliceAsks, slice by slice). The result names every host of
// every slice (nil: no ask).
func SliceAsks(nodes []Node) map[string]*protocol.SliceAsk {
	bySlice := map[string][]protocol.SliceHost{}
	for _, n := range nodes {
		if n.Slice != "" {
			bySlice[n.Slice] = append(bySlice[n.Slice], protocol.SliceHost{Name: n.Name, Phase: n.Phase, Reason: n.Reason, Started: n.Started, Deadline: n.Deadline})
		}
	}
	out := map[string]*protocol.SliceAsk{}
	for slice, hosts := range bySlice {
		maps.Copy(out, protocol.SliceAsks(slice, hosts))
	}
	return out
}

// active: the node's agent has a maintenance under way.
func active(n Node) bool {
	return n.Phase == protocol.PhaseDraining || n.Phase == protocol.PhaseTerminating
}

func sameAsk(a, b *protocol.SliceAsk) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Slice == b.Slice && a.Cause == b.Cause && a.Reason == b.Reason && a.Started.Equal(b.Started) && a.Deadline.Equal(b.Deadline)
}

// askWriters bounds the slice asks written at once: a 64-host slice is
// asked in a few round trips, within the API client's rate.
const askWriters = 16

// applySliceAsks writes every ask that differs from what its host carries,
// up to askWriters at once, conditional on the host being as the pass saw it
// (a conflict is retried by the next pass), and counts a slice
// interruption when a slice is newly taken down.
func (a *Aggregator) applySliceAsks(ctx context.Context, views []Node, decidedOn map[string]*corev1.Node) {
	want := SliceAsks(views)
	take := SliceTriggers(views)
	current := map[string]Node{}
	for _, v := range views {
		current[v.Name] = v
	}
	var names []string
	for name, ask := range want {
		v := current[name]
		if !sameAsk(ask, v.Ask) || (ask != nil) != v.SliceTaint || take[name] != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	written := make([]bool, len(names))
	var g errgroup.Group
	g.SetLimit(askWriters)
	for i, name := range names {
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil // leadership lost
			}
			n := decidedOn[name].DeepCopy()
			protocol.WriteSliceAsk(n, want[name])
			if takenWith := take[name]; takenWith != "" {
				protocol.WriteTrigger(n, protocol.MaintenanceState{TriggeredAt: a.opts.Clock.Now().UTC().Format(time.RFC3339),
					TriggeredBy: a.opts.Identity + ", with " + takenWith, ScheduledTime: protocol.ReadAgentState(n).ScheduledTime})
			}
			if _, err := a.opts.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
				if !apierrors.IsConflict(err) {
					a.log.Warn("slice ask not written", "node", name, "err", err)
				}
				a.poke()
				return nil
			}
			written[i] = true
			return nil
		})
	}
	_ = g.Wait()
	counted := map[string]bool{} // slice -> counted in this pass
	for i, name := range names {
		if !written[i] {
			continue
		}
		ask, v, takenWith := want[name], current[name], take[name]
		if takenWith != "" {
			a.log.Info("pending maintenance taken with the slice's", "node", name, "slice", v.Slice, "with", takenWith)
			a.nodeEvent(name, v.UID, true, protocol.EventSliceTaken, fmt.Sprintf("Host %s of the multi-host slice %s started its pending maintenance now (%s=true); this host's pending maintenance is asked for with it, so that the slice stops once",
				takenWith, v.Slice, protocol.LabelPerformMaintenance))
		}
		switch {
		case ask != nil && (v.Ask == nil || v.Ask.Cause != ask.Cause || !v.Ask.Started.Equal(ask.Started)):
			if !counted[ask.Slice] && !a.sliceCounted(ask, views) {
				counted[ask.Slice] = true
				if i, ok := ask.Reason.Interruption(); ok {
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

// sliceCounted: another host of ask's slice already carries an ask for the
// same cause and start (a pass before this one counted it).
func (a *Aggregator) sliceCounted(ask *protocol.SliceAsk, views []Node) bool {
	for _, v := range views {
		if v.Ask != nil && v.Ask.Slice == ask.Slice && v.Ask.Cause == ask.Cause && v.Ask.Started.Equal(ask.Started) {
			return true
		}
	}
	return false
}
