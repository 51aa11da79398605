package agent

// Observe-only (Options.ObserveOnly): the agent steps as it would and says
// every decision (its Events, marked, its metrics and log), and changes
// nothing: its Node writes are kept in a protocol.Shadow that its next
// steps read through, the drain is a plan said in an Event, Compute
// Engine is not called, and no pod is told or touched.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// ErrObserveOnly is why an observed node's Compute Engine call, or its
// request to the aggregator, is not made.
var ErrObserveOnly = errors.New("observe-only: not made")

// observer is the agent's observe-only mode and the writes it kept.
type observer struct {
	on    atomic.Bool
	known bool // on was decided once (loop goroutine only)
	// restored: the shadow was read back from the node's Lease once;
	// published is what the Lease holds as last written ("" for no
	// Lease, mayExist before the first write). Loop goroutine only.
	restored  bool
	published string
	mu        sync.Mutex
	shadow    protocol.Shadow // guarded by mu
}

// mayExist is observer.published before the agent has written or
// deleted the Lease: one may be left from an earlier agent.
const mayExist = "\x00"

// Wake asks the agent to step again now (after a change it does not
// watch itself, such as the policy's).
func (a *Agent) Wake() { a.poke() }

// observing reports whether the node is observed only now.
func (a *Agent) observing() bool { return a.mode.on.Load() }

// decideMode sets the mode for node (as the API server has it) and says
// each change of it once the mode is known (Options.ObserveOnly); until
// then the node is observed only. Leaving observe-only drops the shadow:
// from then on the agent steps from the Node as it is.
func (a *Agent) decideMode(ctx context.Context, node *corev1.Node) {
	if a.opts.ObserveOnly == nil {
		return
	}
	on, decided := a.opts.ObserveOnly(node)
	if on || !decided {
		a.restoreShadow(ctx)
	}
	if !decided {
		a.mode.on.Store(true)
		return
	}
	was := a.mode.on.Swap(on)
	first := !a.mode.known
	a.mode.known = true
	var dropped []string
	if !on {
		a.mode.mu.Lock()
		keys, cordon := a.mode.shadow.Changed()
		a.mode.shadow = protocol.Shadow{}
		a.mode.mu.Unlock()
		if dropped = keys; cordon {
			dropped = append(dropped, "the cordon")
		}
	}
	if first && !on || !first && on == was {
		return
	}
	msg := "Observe-only: this node's maintenance is decided and said, and nothing is changed: no taint, cordon, label or annotation on the Node, no pod evicted or told, no Compute Engine call."
	if !on {
		msg = fmt.Sprintf("Observe-only ended: the agent acts on this node from now, from the Node as it is (the unmade writes of %s are dropped).", listOrNone(dropped, len(dropped)))
	}
	a.log.Info("observe-only", "on", on)
	a.opts.Events.NodeEvent(false, protocol.EventObserveOnly, msg)
	// The pods hear the node's notice now, not at its next change: an
	// observed node's pods were never told.
	a.pokeNotifier()
}

// listOrNone is names, at most n of them (lifecycle.Excerpt), or "none".
func listOrNone(names []string, n int) string {
	if len(names) == 0 {
		return "none"
	}
	return lifecycle.Excerpt(names, n)
}

// shown is n as the agent would have left it: a copy with the shadow's
// changes while the node is observed only, else n itself.
func (a *Agent) shown(n *corev1.Node) *corev1.Node {
	if !a.observing() {
		return n
	}
	n = n.DeepCopy()
	a.mode.mu.Lock()
	a.mode.shadow.Overlay(n)
	a.mode.mu.Unlock()
	return n
}

// keep records in the shadow the write that turns before into after, and
// steps again when it changed anything: what a real write's watch event
// would do.
func (a *Agent) keep(before, after *corev1.Node) {
	a.mode.mu.Lock()
	changed := a.mode.shadow.Record(before, after)
	a.mode.mu.Unlock()
	if changed {
		a.poke()
	}
}

// markedEvents marks every Event of an observed node as observe-only.
type markedEvents struct {
	Events
	on *atomic.Bool
}

func (m markedEvents) NodeEvent(warning bool, reason, message string) {
	if m.on.Load() && !strings.HasPrefix(message, "Observe-only") {
		message = protocol.ObservedMark + message
	}
	m.Events.NodeEvent(warning, reason, message)
}

// planDrain is the drain of an observed node: it says whom the drain would
// ask to stop, in order, by when, and reports the node emptied at once.
func (a *Agent) planDrain(deadline time.Time, voluntary bool) drain.Result {
	now := a.opts.Clock.Now()
	plan := drain.Plan(a.opts.Pods.List(), a.opts.Self, a.timing, now, deadline)
	names := make([]string, 0, len(plan))
	for _, p := range plan {
		names = append(names, fmt.Sprintf("%s/%s (%s, at %s, grace %s)", p.Pod.Namespace, p.Pod.Name, p.Group, p.NotBefore.UTC().Format(time.TimeOnly), p.Grace))
	}
	kind := "forced: a pod its PodDisruptionBudget still holds at the deadline less its grace would be deleted"
	if voluntary {
		kind = "voluntary: no pod would be deleted"
	}
	a.opts.Events.NodeEvent(false, protocol.EventObserveOnly, fmt.Sprintf("Observe-only: the drain (%s) would ask %d pod(s) to stop by %s, in this order: %s; none was asked.",
		kind, len(plan), deadline.UTC().Format(time.RFC3339), listOrNone(names, 20)))
	a.log.Info("observe-only: drain planned, not run", "pods", len(plan), "deadline", deadline)
	return drain.Result{}
}

// restoreShadow reads, once, the unmade writes an earlier agent of this
// node published on its Lease: an observed node's state outlives its
// agent there, as an acting node's does on the Node.
func (a *Agent) restoreShadow(ctx context.Context) {
	if a.mode.restored || a.opts.Leases == nil || a.opts.ShadowNamespace == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	l, err := a.opts.Leases.Leases(a.opts.ShadowNamespace).Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		a.mode.restored, a.mode.published = true, ""
		return
	case err != nil:
		a.log.Warn("the observed node's Lease cannot be read; tried again next step", "err", err)
		return
	}
	a.mode.restored, a.mode.published = true, l.Annotations[protocol.AnnotationShadow]
	s, err := protocol.DecodeShadow(a.mode.published)
	if err != nil {
		a.log.Warn("the observed node's Lease is unreadable; the agent starts from the Node as it is", "err", err)
		return
	}
	a.mode.mu.Lock()
	a.mode.shadow = s
	a.mode.mu.Unlock()
}

// publishShadow keeps the node's Lease holding the shadow while the node
// is observed, and deletes it once the node is not. A write that fails is
// tried again at the next step.
func (a *Agent) publishShadow(ctx context.Context) {
	if a.opts.Leases == nil || a.opts.ShadowNamespace == "" || a.opts.ObserveOnly == nil {
		return
	}
	on := a.observing()
	a.mode.mu.Lock()
	value := a.mode.shadow.Encode()
	a.mode.mu.Unlock()
	if on && value == a.mode.published || !on && a.mode.published == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	leases := a.opts.Leases.Leases(a.opts.ShadowNamespace)
	var err error
	switch {
	case !on:
		if err = leases.Delete(ctx, a.opts.NodeName, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
			err = nil
		}
		value = ""
	case a.mode.published == "":
		_, err = leases.Create(ctx, a.shadowLease(value), metav1.CreateOptions{FieldManager: fieldManager})
	default:
		var l *coordinationv1.Lease
		if l, err = leases.Get(ctx, a.opts.NodeName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, a.shadowLease(value), metav1.CreateOptions{FieldManager: fieldManager})
		} else if err == nil {
			l.Annotations = a.shadowLease(value).Annotations
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
		}
	}
	if err != nil {
		a.log.Warn("the observed node's Lease not written; tried again next step", "err", err)
		return
	}
	a.mode.published = value
}

// shadowLease is the node's Lease holding value.
func (a *Agent) shadowLease(value string) *coordinationv1.Lease {
	holder := a.opts.NodeName
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Namespace: a.opts.ShadowNamespace,
			Labels:      maps.Clone(protocol.ObservedNodeLabels),
			Annotations: map[string]string{protocol.AnnotationShadow: value}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
}
