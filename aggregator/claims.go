package aggregator

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"sync"
	"time"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Fencing. A trigger is decided from the Nodes, then written; between the
// two, a leader may be deposed (paused, partitioned) while a new one
// triggers other nodes, and the deposed leader's late write would then
// exceed the caps. So every trigger is first claimed in one object, the
// claims Lease, by an update conditional on the version of it that the
// pass read:
//
//   - a claim records the node's resourceVersion, the one the trigger's
//     write is conditional on;
//   - a pass counts every claim whose write may still land as a node in
//     voluntary maintenance;
//   - a claim is dropped once the node's resourceVersion differs from the
//     claimed one (the write landed, and the Node itself shows the
//     maintenance, or it can never land) and the node cache is that recent;
//   - a deposed leader's claim fails, since the new leader's claims changed
//     the Lease; a claim it made before it was deposed is counted by the
//     new leader until it is resolved.
//
//   - a new leader writes the claims Lease once when it takes over, before
//     its first pass (fence), so that a deposed leader's claim made on
//     what it read before fails even when the new leader has nothing to
//     claim itself.
//
// The claims Lease is never renewed and holds no holder: it is only a
// versioned record, in annotationClaims (and annotationFence, the last
// takeover).

// annotationClaims holds the claims, as JSON {"node": "resourceVersion"}.
// It is on the claims Lease, not on a Node.
const annotationClaims = "maintenance-handler.io/voluntary-claims"

// annotationFence records the last leader to take over the claims, as
// "identity at time": writing it changes the Lease's version.
const annotationFence = "maintenance-handler.io/claims-fenced-by"

// ClaimsLeaseName is the claims Lease's name for a leader-election Lease.
func ClaimsLeaseName(leaseName string) string { return leaseName + "-claims" }

// ErrFenced: the claims changed since this replica read them (another
// leader claimed); nothing was claimed.
var ErrFenced = errors.New("claims changed since read (another leader claims): fenced")

// claims is the claims Lease as read: its resourceVersion ("" when it does
// not exist yet) and node -> the resourceVersion the trigger's write is
// conditional on.
type claims struct {
	version string
	nodes   map[string]string
	// over is the version a write of this replica replaced (set only on
	// the claims it wrote).
	over string
}

func readClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name string) (claims, error) {
	l, err := c.Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return claims{nodes: map[string]string{}}, nil
	}
	if err != nil {
		return claims{}, err
	}
	return claimsIn(l)
}

// claimsIn reads the claims on the claims Lease l.
func claimsIn(l *coordinationv1.Lease) (claims, error) {
	out := claims{version: l.ResourceVersion, nodes: map[string]string{}}
	if raw := l.Annotations[annotationClaims]; raw != "" {
		nodes, err := decodeClaims(raw)
		if err != nil {
			// Unreadable claims cannot be counted: claim nothing until a
			// write replaces them (ours, with what the Nodes say).
			return out, fmt.Errorf("claims Lease %s/%s: %s unreadable: %w", l.Namespace, l.Name, annotationClaims, err)
		}
		out.nodes = nodes
	}
	return out, nil
}

// claimsWatch lists and watches the claims Lease alone.
func claimsWatch(c coordinationv1client.LeasesGetter, namespace, name string) kube.ListWatch {
	return leasesWatch(c, namespace, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
}

// leasesWatch lists and watches the Leases of namespace that sel's
// selectors select.
func leasesWatch(c coordinationv1client.LeasesGetter, namespace string, sel metav1.ListOptions) kube.ListWatch {
	only := func(opts metav1.ListOptions) metav1.ListOptions {
		opts.FieldSelector, opts.LabelSelector = sel.FieldSelector, sel.LabelSelector
		return opts
	}
	return kube.ListWatch{Object: &coordinationv1.Lease{},
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.Leases(namespace).List(ctx, only(opts))
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Leases(namespace).Watch(ctx, only(opts))
		}}
}

// currentClaims are the claims as the claims Lease's watch shows them, or
// as this replica last wrote them while the watch still shows the version
// that write replaced: a pass reads them without a request, and a write
// of them is conditional on their version, so a watch that lags behind
// another replica's write costs a conflict (retried by the next pass),
// never a claim not counted.
func (a *Aggregator) currentClaims() (claims, error) {
	cl := claims{nodes: map[string]string{}}
	if obj, ok := a.claimsCache.Get(a.opts.Namespace + "/" + ClaimsLeaseName(a.opts.LeaseName)); ok {
		l, isLease := obj.(*coordinationv1.Lease)
		if !isLease {
			return claims{}, fmt.Errorf("claims Lease: a %T in the cache", obj)
		}
		var err error
		if cl, err = claimsIn(l); err != nil {
			return cl, err
		}
	}
	if w := a.wroteClaims; w.nodes != nil && cl.version == w.over {
		return w, nil
	}
	return cl, nil
}

// writeClaims replaces the claims with nodes, conditional on the Lease
// being at prev.version. It returns ErrFenced when it is not.
func writeClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name string, prev claims, nodes map[string]string) (claims, error) {
	return putClaims(ctx, c, namespace, name, prev, nodes, "")
}

// fenceClaims writes the claims Lease as it is (its claims kept) with
// fencedBy, so that its version changes: every claim conditional on an
// earlier read fails from then on. It returns the claims as written, or
// ErrFenced when another replica wrote between the read and the write.
func fenceClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name, fencedBy string) (claims, error) {
	cl, err := readClaims(ctx, c, namespace, name)
	if err != nil {
		if cl.nodes == nil {
			return cl, err // not read
		}
		// Unreadable claims are replaced by none: the passes then count
		// what the Nodes say.
		cl.nodes = map[string]string{}
	}
	return putClaims(ctx, c, namespace, name, cl, cl.nodes, fencedBy)
}

// putClaims writes nodes (and fencedBy when set) conditional on
// prev.version.
func putClaims(ctx context.Context, c coordinationv1client.LeasesGetter, namespace, name string, prev claims, nodes map[string]string, fencedBy string) (claims, error) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: prev.version,
		Annotations: map[string]string{annotationClaims: encodeClaims(nodes)}}}
	if fencedBy != "" {
		l.Annotations[annotationFence] = fencedBy
	}
	var err error
	if prev.version == "" {
		l, err = c.Leases(namespace).Create(ctx, l, metav1.CreateOptions{FieldManager: fieldManager})
	} else {
		l, err = c.Leases(namespace).Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return prev, ErrFenced
	}
	if err != nil {
		return prev, err
	}
	return claims{version: l.ResourceVersion, nodes: maps.Clone(nodes), over: prev.version}, nil
}

// claimState is what a claim's node says of it.
type claimState int

const (
	// claimLive: the claimed write may still land; count the node.
	claimLive claimState = iota
	// claimResolved: the write landed or never will, and the node cache
	// shows the node as it is: the Node alone is counted.
	claimResolved
)

// resolve tells whether the claim of a node at claimedRV is resolved.
// cached is the node cache's object (nil if the cache has none); current
// is the API server's, read when the cache is not at claimedRV (nil: not
// found).
func resolve(claimedRV string, cached, current *corev1.Node) claimState {
	if cached != nil && cached.ResourceVersion == claimedRV {
		return claimLive // unchanged since the claim: the write may still land
	}
	if current == nil {
		return claimResolved // deleted: no write can land
	}
	if current.ResourceVersion == claimedRV {
		return claimLive
	}
	// Changed since the claim, so the conditional write landed or never
	// will; count from the cache only once it shows the node as it is.
	if cached != nil && cached.ResourceVersion == current.ResourceVersion {
		return claimResolved
	}
	return claimLive
}

// liveClaims are the claims whose write may still land (see resolve).
//
// A claim this replica made itself needs no read: it claimed the node at
// the version its cache showed, and a watch's cache only moves forward, so
// once the cache shows another version the conditional write has landed
// (and the cache shows it) or never will. Any other claim (a previous
// leader's, or one whose node the cache lacks) is read from the API
// server, up to inFlight at once: after a storm a pass may hold hundreds.
func (a *Aggregator) liveClaims(ctx context.Context, cl claims, cached map[string]*corev1.Node) map[string]string {
	for name := range a.claimedHere {
		if _, ok := cl.nodes[name]; !ok {
			delete(a.claimedHere, name)
		}
	}
	live := map[string]string{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(inFlight)
	for name, rv := range cl.nodes {
		c := cached[name]
		switch {
		case c != nil && c.ResourceVersion == rv && a.refusals.refusedAt(name, rv):
			continue // the write at that version was refused for good: it cannot land
		case c != nil && c.ResourceVersion == rv:
			live[name] = rv // unchanged since the claim
			continue
		case c != nil && a.claimedHere[name] == rv:
			continue // ours, and the cache has moved past it: resolved
		}
		g.Go(func() error {
			state := claimLive // unknown (the read failed): counted
			n, err := a.opts.Client.GetNode(ctx, name)
			switch {
			case err == nil:
				state = resolve(rv, c, n)
			case apierrors.IsNotFound(err):
				state = resolve(rv, c, nil)
			}
			if state == claimLive {
				mu.Lock()
				live[name] = rv
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return live
}

// trigger writes the opportunistic trigger onto n, conditional on the Node
// being as the pass saw it (n, a cached object: not modified), and says
// whether it landed.
func (a *Aggregator) trigger(ctx context.Context, cached *corev1.Node) bool {
	n := cached.DeepCopy()
	name := n.Name
	// The agent re-checks the trigger: made now, for this notice.
	protocol.WriteTrigger(n, protocol.MaintenanceState{OpportunisticTriggered: true,
		TriggeredAt: a.opts.Clock.Now().UTC().Format(time.RFC3339), TriggeredBy: a.opts.Identity,
		ScheduledTime: protocol.ReadAgentState(n).ScheduledTime})
	err := a.writeNode(ctx, cached, n)
	switch {
	case err == nil && a.observed(cached):
		a.opts.Metrics.Triggers.WithLabelValues(protocol.ManualObserved).Inc()
		a.log.Info("observe-only: opportunistic maintenance decided, not triggered", "node", name)
		return true
	case err == nil:
		a.opts.Metrics.Triggers.WithLabelValues("ok").Inc()
		a.log.Info("triggered opportunistic maintenance", "node", name)
		return true
	case apierrors.IsConflict(err):
		a.opts.Metrics.Triggers.WithLabelValues("conflict").Inc()
	default:
		a.opts.Metrics.Triggers.WithLabelValues("error").Inc()
		a.log.Warn("trigger failed", "node", name, "err", err)
	}
	return false
}

// withdrawUnanswered removes the opportunistic triggers that no agent
// answered within TriggerAnswerTimeout (its agent down, the node NotReady:
// the agent neither started nor refused), each with a Warning Event; the
// next pass no longer counts them against the caps. A write that
// conflicts is tried again next pass.
func (a *Aggregator) withdrawUnanswered(ctx context.Context, views iter.Seq[*fleet.Node], nodes map[string]*corev1.Node) {
	now := a.opts.Clock.Now()
	for name, at := range a.unanswered {
		if now.Sub(at) > unansweredCooldown {
			delete(a.unanswered, name)
		}
	}
	for v := range views {
		if !v.Asked || !v.Triggered || v.Phase != protocol.PhaseIdle || v.TriggeredAt.IsZero() || now.Sub(v.TriggeredAt) <= a.opts.TriggerAnswerTimeout {
			continue
		}
		cached := nodes[v.Name]
		if cached == nil {
			continue
		}
		_, _, ms := protocol.ReadTrigger(cached)
		n := cached.DeepCopy()
		protocol.ConsumeTrigger(n)
		if err := a.writeNode(ctx, cached, n); err != nil {
			a.log.Info("unanswered trigger not withdrawn; next pass tries again", "node", n.Name, "err", err)
			continue
		}
		a.unanswered[n.Name] = now
		if a.observed(cached) {
			// Its trigger was never written, so no agent answers it.
			a.nodeEvent(n.Name, n.UID, false, protocol.EventObserveOnly, fmt.Sprintf(
				"Observe-only: the opportunistic trigger decided at %s was not written; it is dropped after %s, and the node is not picked again for %s.",
				ms.TriggeredAt, a.opts.TriggerAnswerTimeout, unansweredCooldown))
			continue
		}
		a.nodeEvent(n.Name, n.UID, true, protocol.EventTriggerWithdrawn, fmt.Sprintf(
			"No agent answered the opportunistic trigger written at %s by %s within %s (the agent is down or the node NotReady): withdrawn; the node no longer counts against the caps, and is not picked again for %s.",
			ms.TriggeredAt, ms.TriggeredBy, a.opts.TriggerAnswerTimeout, unansweredCooldown))
	}
}

// unansweredCooldown is how long a node whose trigger went unanswered is
// not picked again, as after a failed voluntary maintenance (the agents'
// first cool-down).
const unansweredCooldown = time.Hour

// unansweredFailure is f with the unanswered trigger withdrawn at at
// counted as one more failure, when that is the later news.
func unansweredFailure(f protocol.Failures, at time.Time) protocol.Failures {
	if retry := at.Add(unansweredCooldown); retry.After(f.RetryAfter) {
		f.Count++
		f.Reason, f.Last, f.RetryAfter = "unanswered", at, retry
	}
	return f
}

// claimsOf is what a pass claims: the nodes to trigger (plans', unless
// the configuration is invalid), those whose repair it approves
// (faults'), and every claim, with the live ones, at the resourceVersion
// each write is conditional on; deferred triggers did not fit on the
// claims Lease (fitClaims) and wait for the next pass.
func claimsOf(plans []fleet.PoolPlan, faults fleet.FaultPlan, live map[string]string, decidedOn map[string]*corev1.Node, cfgErr error) (toTrigger, approved []*corev1.Node, claimed map[string]string, deferred int) {
	others := maps.Clone(live)
	for _, f := range faults.Faults {
		if n := decidedOn[f.Node]; n != nil && f.Reason == fleet.FaultApproved {
			approved = append(approved, n)
			others[f.Node] = n.ResourceVersion
		}
	}
	for _, p := range plans {
		if cfgErr != nil || p.ConfigErr != nil {
			continue
		}
		for _, name := range p.Trigger {
			if n := decidedOn[name]; n != nil {
				toTrigger = append(toTrigger, n)
			}
		}
	}
	toTrigger, claimed, deferred = fitClaims(others, toTrigger)
	return toTrigger, approved, claimed, deferred
}
