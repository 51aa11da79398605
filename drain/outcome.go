package drain

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// What the drain makes of each call's outcome: the pod's next try, its
// Events, the counts.

// record takes in the outcome of one call. The metric is counted last, once
// the pod's state (its next try) is set.
func (d *Drainer) record(log *slog.Logger, a *action, pdbs *budgets, res *Result) {
	p, st := a.pod, a.st
	defer d.opts.Recorder.Eviction(a.outcome)
	if a.request {
		d.recordRequest(log, a, res)
		return
	}
	if a.escalate {
		if a.outcome == OutcomeEscalated {
			d.opts.Recorder.Escalation()
			res.Deleted++
			msg := fmt.Sprintf("Pod %s was still protected by a PodDisruptionBudget at the last moment that leaves it its %s grace period before the VM stops; deleted it",
				klogRef(p), a.grace)
			switch {
			case st.requested && !st.blocked && st.failure == "":
				msg = fmt.Sprintf("Pod %s, asked for through an EvictionRequest, was still there at the last moment that leaves it its %s grace period before the VM stops; deleted it",
					klogRef(p), a.grace)
			case !st.blocked:
				msg = fmt.Sprintf("The eviction of pod %s was still failing (%s) at the last moment that leaves it its %s grace period before the VM stops; deleted it",
					klogRef(p), st.failure, a.grace)
			}
			d.opts.Events.NodeEvent(true, protocol.EventEscalated, msg)
			log.Warn("pod deleted after refused evictions", "pod", klogRef(p), "grace", a.grace)
		}
		st.evicted = a.outcome != OutcomeError
		if !st.evicted {
			st.nextTry = d.opts.Clock.Now().Add(d.opts.RetryInterval)
		}
		return
	}
	switch a.outcome {
	case OutcomeEvicted:
		st.evicted = true
		res.Evicted++
		log.Info("pod evicted", "pod", klogRef(p), "grace", a.grace)
	case OutcomeBlocked:
		if !st.blocked {
			msg := fmt.Sprintf("Eviction of pod %s is refused by a PodDisruptionBudget; retrying, and deleting it at %s so that it still gets its %s grace period",
				klogRef(p), a.escalateAt.UTC().Format(time.RFC3339), a.grace)
			switch {
			case a.voluntary:
				msg = fmt.Sprintf("Eviction of pod %s is refused by a PodDisruptionBudget; retrying until %s. This maintenance is voluntary: the budget holds, the pod is never deleted, and a drain that cannot finish is given up",
					klogRef(p), a.deadline.UTC().Format(time.RFC3339))
			case !a.at.Before(a.escalateAt):
				msg = fmt.Sprintf("Eviction of pod %s is refused by a PodDisruptionBudget, and its %s grace period no longer fits before the VM stops; deleting it now, with the %s left",
					klogRef(p), PodGrace(p), a.grace)
			}
			d.opts.Events.NodeEvent(true, protocol.EventBlocked, msg)
		}
		st.blocked = true
		st.nextTry = d.opts.Clock.Now().Add(d.opts.RetryInterval)
		pdbs.follow(p.Namespace)
		_, st.budgets = pdbs.allows(p)
	case OutcomeThrottled:
		// The API server's load, not the pod's budget: no Warning, and
		// the pod is not marked for deletion; tried again when asked.
		wait := a.retryAfter
		if wait <= 0 {
			wait = d.opts.RetryInterval
		}
		st.nextTry = d.opts.Clock.Now().Add(wait)
		log.Info("eviction throttled by the API server", "pod", klogRef(p), "retryAfter", wait)
	case OutcomeError:
		if st.failure == "" {
			d.opts.Events.NodeEvent(true, protocol.EventEvictionFailed, failedMessage(a))
		}
		st.failure = a.err.Error()
		st.nextTry = d.opts.Clock.Now().Add(d.opts.RetryInterval)
	}
}

// failedMessage is the Warning of a pod's first eviction that failed for
// another reason than a budget: what happens next.
func failedMessage(a *action) string {
	switch {
	case a.voluntary:
		return fmt.Sprintf("Eviction of pod %s failed: %v. Retrying until %s; this maintenance is voluntary, so the pod is never deleted, and a drain that cannot finish is given up",
			klogRef(a.pod), a.err, a.deadline.UTC().Format(time.RFC3339))
	case !a.at.Before(a.escalateAt):
		return fmt.Sprintf("Eviction of pod %s failed: %v. Its %s grace period no longer fits before the VM stops; deleting it now, with the %s left",
			klogRef(a.pod), a.err, PodGrace(a.pod), a.grace)
	}
	return fmt.Sprintf("Eviction of pod %s failed: %v. Retrying, and deleting it at %s so that it still gets its %s grace period",
		klogRef(a.pod), a.err, a.escalateAt.UTC().Format(time.RFC3339), a.grace)
}
