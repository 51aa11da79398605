package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
)

// Drainer empties the node by a deadline; *drain.Drainer implements it.
type Drainer interface {
	// Drain empties the node by deadline, deleting a pod a
	// PodDisruptionBudget still protects at deadline minus its grace.
	Drain(ctx context.Context, deadline time.Time, why drain.Disruption) (drain.Result, error)
	// DrainVoluntary never deletes such a pod: it is left (Result.Left).
	DrainVoluntary(ctx context.Context, deadline time.Time) (drain.Result, error)
}

var _ Drainer = (*drain.Drainer)(nil)

// followDrain makes the running drain the one the decision orders: it
// starts it, restarts it when the order changed (a preemption moved the
// deadline), and stops it when none must run.
func (a *Agent) followDrain(ctx context.Context, order lifecycle.DrainOrder) {
	observed := a.observing()
	a.mu.Lock()
	running, runningObserved := a.drainFor, a.drainObserved
	a.mu.Unlock()
	if running.Equal(order) && runningObserved == observed {
		return
	}
	a.stopDrain()
	if !order.IsZero() {
		a.startDrain(ctx, order)
	}
}

func (a *Agent) startDrain(ctx context.Context, order lifecycle.DrainOrder) {
	dctx, cancel := context.WithCancel(ctx)
	observed := a.observing()
	a.mu.Lock()
	a.drainFor, a.drainObserved = order, observed
	a.drainStop = cancel
	a.drainStart = a.opts.Clock.Now()
	a.mu.Unlock()
	a.drainGroup.Add(1)
	go func() {
		defer a.drainGroup.Done()
		a.log.Info("drain started", "maintenance_started", order.For, "deadline", order.Deadline, "observe_only", observed)
		var res drain.Result
		var err error
		switch {
		case observed:
			res = a.planDrain(order.Deadline, order.Voluntary)
		case order.Voluntary:
			res, err = a.opts.Drainer.DrainVoluntary(dctx, order.Deadline)
		default:
			res, err = a.opts.Drainer.Drain(dctx, order.Deadline, disruption(order))
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				a.log.Warn("drain ended early", "err", err)
			}
			return
		}
		a.log.Info("drain finished", "evicted", res.Evicted, "deleted", res.Deleted, "left", res.Left)
		a.mu.Lock()
		a.drainEnded, a.drainLeft = order, res.Left
		a.mu.Unlock()
		a.poke()
	}()
}

func (a *Agent) stopDrain() {
	a.mu.Lock()
	stop := a.drainStop
	a.drainStop, a.drainFor, a.drainStart = nil, lifecycle.DrainOrder{}, time.Time{}
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	a.drainGroup.Wait()
}

// disruption is what a pod the drain of order deletes is told (its
// DisruptionTarget condition).
func disruption(order lifecycle.DrainOrder) drain.Disruption {
	return drain.Disruption{Reason: order.Reason.DisruptionReason(),
		Message: fmt.Sprintf("maintenance-handler: the node drains for %s; the VM is expected to stop by %s", order.Reason, order.Deadline.UTC().Format(time.RFC3339))}
}
