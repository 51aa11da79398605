package drain

// Asking through EvictionRequests (lifecycle.k8s.io/v1alpha1, Kubernetes
// 1.37 with the EvictionRequestAPI feature gate): a pod that names eviction
// responders is asked to go through them first, and the request is
// withdrawn if the maintenance ends without the pod.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Requests is the EvictionRequest API the drain asks through; kube.Client
// implements it.
type Requests interface {
	// RequestEviction writes the requester's EvictionRequest name for pod
	// p with the intent Eviction: created, or its intent set again where
	// it is there.
	RequestEviction(ctx context.Context, name string, p *corev1.Pod, requester string) error
	// WithdrawEviction sets the intent of the EvictionRequest name of
	// namespace to Withdrawn; one that is not there is no error.
	WithdrawEviction(ctx context.Context, namespace, name string) error
}

// OutcomeRequested: an EvictionRequest asks for the pod's eviction, and its
// responders have until its fallback (Options.Requests).
const OutcomeRequested = "requested"

// NamesResponders reports whether a drain with Options.Requests asks for
// p's eviction through an EvictionRequest: p names eviction responders
// (spec.evictionResponders) and belongs to no scheduling group, whose pods
// the API does not take.
func NamesResponders(p *corev1.Pod) bool {
	return len(p.Spec.EvictionResponders) > 0 && p.Spec.SchedulingGroup == nil
}

// RequestName is the name of the drain's EvictionRequest for p: one per
// pod (by its UID), the project's own.
func RequestName(p *corev1.Pod) string { return "maintenance-handler-" + string(p.UID) }

// request asks for p's eviction through its EvictionRequest.
func (d *Drainer) request(ctx context.Context, p *corev1.Pod) (string, error) {
	if err := d.opts.Requests.RequestEviction(ctx, RequestName(p), p, protocol.EvictionRequester); err != nil {
		return OutcomeError, err
	}
	return OutcomeRequested, nil
}

// recordRequest takes in a request's outcome. Asked, the pod is left to
// its responders until its fallback: the last moment that leaves it its
// grace before its group's deadline (EscalateAt), when a drain that must
// end deletes it, and a voluntary one evicts it through the Eviction API.
// Not asked (the API not served, the call refused), it is evicted through
// the Eviction API at once.
func (d *Drainer) recordRequest(log *slog.Logger, a *action, res *Result) {
	p, st := a.pod, a.st
	if a.outcome != OutcomeRequested {
		st.noRequest, st.nextTry = true, d.opts.Clock.Now()
		log.Warn("EvictionRequest not written; evicting through the Eviction API", "pod", klogRef(p), "err", a.err)
		return
	}
	st.requested, st.fallbackAt, st.nextTry = true, a.escalateAt, a.escalateAt
	if res.requested == nil {
		res.requested = map[types.UID]*corev1.Pod{}
	}
	res.requested[p.UID] = p
	then := fmt.Sprintf("it is deleted then, with its %s grace period, if it is still there", a.grace)
	if a.voluntary {
		then = "it is evicted through the Eviction API then (PodDisruptionBudgets hold) if it is still there"
	}
	names := make([]string, 0, len(p.Spec.EvictionResponders))
	for _, r := range p.Spec.EvictionResponders {
		names = append(names, r.Name)
	}
	d.opts.Events.NodeEvent(false, protocol.EventEvictionRequested, fmt.Sprintf(
		"Asked for pod %s's eviction through the EvictionRequest %s (its responders: %s); they have until %s: %s",
		klogRef(p), RequestName(p), strings.Join(names, ", "), a.escalateAt.UTC().Format(time.RFC3339), then))
	log.Info("eviction requested", "pod", klogRef(p), "fallback", a.escalateAt)
}

// withdraw withdraws the drain's EvictionRequests whose pods are still on
// the node and not stopping: the drain ended without them (the maintenance
// cancelled, the drain given up, or their group's share of the deadline
// over). A request whose pod is gone goes with it (its owner).
func (d *Drainer) withdraw(ctx context.Context, requested map[types.UID]*corev1.Pod) {
	if len(requested) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), escalationCallTimeout)
	defer cancel()
	var withdrawn []string
	for _, p := range d.opts.Pods.List() {
		if requested[p.UID] == nil || p.DeletionTimestamp != nil {
			continue
		}
		if err := d.opts.Requests.WithdrawEviction(ctx, p.Namespace, RequestName(p)); err != nil {
			d.opts.Logger.Warn("EvictionRequest not withdrawn", "pod", klogRef(p), "err", err)
			continue
		}
		withdrawn = append(withdrawn, klogRef(p))
	}
	if len(withdrawn) > 0 {
		d.opts.Events.NodeEvent(false, protocol.EventEvictionWithdrawn, fmt.Sprintf(
			"The drain ended with %d pod(s) it had asked for through EvictionRequests still on the node; their requests are withdrawn: %s",
			len(withdrawn), excerptList(withdrawn, 10)))
	}
}
