package aggregator

// The Compute relay: by default the nodes hold no Compute Engine
// permission, and the leader makes the calls on a node's VM that its
// agent asks for through its Node (protocol/relay.go), once it has checked
// the ask against what the node cannot write (vouch.go). It follows each
// call's operation to its end, and a new leader takes up what the last
// left: an unanswered ask, an operation not yet seen to end. Its work is
// bounded per node (relaylimit.go), and its answers are written through a
// client of their own (Options.RelayClient).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// VMCaller makes the calls on one VM that agents ask for;
// compute.Maintainer implements it.
type VMCaller interface {
	PerformMaintenance(ctx context.Context, inst compute.Instance, requestID string) (string, error)
	ReportHostAsFaulty(ctx context.Context, inst compute.Instance, requestID, behavior, description string) (string, error)
	InstanceGroupMaintenance(ctx context.Context, inst compute.Instance, requestID string, subBlock bool, members int) (string, error)
	WaitOperation(ctx context.Context, inst compute.Instance, name string) (time.Time, error)
	Scheduling(ctx context.Context, inst compute.Instance) (compute.Scheduling, error)
}

// relayCallTimeout bounds one call with its retries; the agent's own
// deadline bounds its wait, and a later ask is answered anew.
const relayCallTimeout = 5 * time.Minute

// relayConcurrency bounds the calls and follows under way at once.
const relayConcurrency = 32

// relay is the leader's caller. Its queue is fed by the Node watch while
// the replica leads, and drained by the leader.
type relay struct {
	a      *Aggregator
	caller VMCaller
	// client writes the answers: a client of their own (Options.RelayClient).
	client  *kube.Client
	buckets *relayBuckets

	mu     sync.Mutex
	queued map[string]bool
	// busy: the work under way, one per node and kind ("call/NODE").
	busy map[string]bool
	// held: the groups whose call waits for their members' drains (group
	// name -> the asking node), asked again at any change of a member.
	held map[string]string
	// observed: the asks of observed nodes already said (refuseObserved).
	observed map[string]bool
	wake     chan struct{}
	slots    chan struct{}
}

func newRelay(a *Aggregator, caller VMCaller) *relay {
	client := a.opts.RelayClient
	if client == nil {
		client = a.opts.Client
	}
	return &relay{a: a, caller: caller, client: client, buckets: newRelayBuckets(a.opts.Clock, a.opts.RelayRate),
		queued: map[string]bool{}, busy: map[string]bool{}, held: map[string]string{}, observed: map[string]bool{},
		wake: make(chan struct{}, 1), slots: make(chan struct{}, relayConcurrency)}
}

// asks says whether n asks the relay for anything.
func asks(n *corev1.Node) bool {
	return n.Annotations[protocol.AnnotationComputeCall] != "" || n.Annotations[protocol.AnnotationVMRead] != ""
}

// mark queues o's node when it asks for something, and the node whose
// group call waits for o's drain.
func (r *relay) mark(o kube.Object) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	r.mu.Lock()
	asker := ""
	if len(r.held) > 0 {
		asker = r.held[r.a.opts.grouping().Name(n)]
	}
	if asks(n) {
		r.queued[n.Name] = true
	}
	if asker != "" {
		r.queued[asker] = true
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run answers the asks until ctx ends (the lead is lost): first those the
// Nodes hold now, then each as it comes.
func (r *relay) run(ctx context.Context) {
	for _, o := range r.a.nodes.List() {
		r.mark(o)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		names := r.queued
		r.queued = map[string]bool{}
		r.mu.Unlock()
		for name := range names {
			if o, ok := r.a.nodes.Get(name); ok {
				if n, ok := o.(*corev1.Node); ok {
					r.handle(ctx, &wg, n)
				}
			}
		}
	}
}

// handle starts what n asks for that is not answered nor under way.
func (r *relay) handle(ctx context.Context, wg *sync.WaitGroup, n *corev1.Node) {
	if r.a.observed(n) {
		r.refuseObserved(n)
		return
	}
	if id := n.Annotations[protocol.AnnotationVMRead]; id != "" {
		if f, ok := protocol.ReadVMFacts(n); !ok || f.ID != id {
			r.start(ctx, wg, n.Name, relayRead, func(n *corev1.Node) bool {
				if id := n.Annotations[protocol.AnnotationVMRead]; id != "" {
					if f, ok := protocol.ReadVMFacts(n); !ok || f.ID != id {
						r.read(ctx, n, id)
						return true
					}
				}
				return false
			})
		}
	}
	c, ok := protocol.ReadComputeCall(n)
	if !ok {
		return
	}
	ans, answered := protocol.ReadComputeAnswer(n)
	switch {
	case !answered || ans.ID != c.ID:
		r.start(ctx, wg, n.Name, relayCall, func(n *corev1.Node) bool {
			// The ask as it stands once the work's turn came.
			c, ok := protocol.ReadComputeCall(n)
			if ans, answered := protocol.ReadComputeAnswer(n); ok && (!answered || ans.ID != c.ID) {
				return r.call(ctx, n, c)
			}
			return false
		})
	case ans.Operation != "" && !ans.Done && !ans.Unfollowed:
		r.start(ctx, wg, n.Name, relayFollow, func(*corev1.Node) bool { r.follow(ctx, n, ans); return true })
	}
}

// start runs f once for node and kind at a time, within the relay's
// concurrency; a call or a read waits first for the node's bucket
// (relaylimit.go). f is given the node as the cache holds it when its
// turn comes (not run when the Node is gone), and says whether it did the
// work (false: nothing was asked any more, or a group call waits for its
// members; the bucket's token is given back). An ask that changed while
// the node's work of its kind was under way is handled when that work
// ends: the answer's write is a change of the Node.
func (r *relay) start(ctx context.Context, wg *sync.WaitGroup, node, kind string, f func(*corev1.Node) bool) {
	key := kind + "/" + node
	r.mu.Lock()
	if r.busy[key] {
		r.mu.Unlock()
		return
	}
	r.busy[key] = true
	r.mu.Unlock()
	wg.Go(func() {
		defer func() {
			r.mu.Lock()
			delete(r.busy, key)
			r.mu.Unlock()
		}()
		refund := func() {}
		if kind != relayFollow {
			var d time.Duration
			if d, refund = r.buckets.take(node, kind); d > 0 {
				r.a.opts.Metrics.RelayLimited.WithLabelValues(kind).Inc()
				r.a.log.Warn("a node asks the relay faster than its rate; its ask waits", "node", node, "kind", kind, "wait", d)
				if !waitOn(ctx, r.a.opts.Clock, d) {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case r.slots <- struct{}{}:
		}
		defer func() { <-r.slots }()
		o, ok := r.a.nodes.Get(node)
		switch n, isNode := o.(*corev1.Node); {
		case ok && isNode:
			if !f(n) {
				refund()
			}
		case !ok:
			r.buckets.forget(node)
		}
	})
}

// call makes c on n's VM, if vouch allows it, and writes the answer;
// false when the call waits for its group's members (no answer yet).
func (r *relay) call(ctx context.Context, n *corev1.Node, c protocol.ComputeCall) bool {
	ans := protocol.ComputeAnswer{ID: c.ID}
	g := r.a.opts.grouping()
	group := r.group(n)
	inst, why := vouch(n, c, g, group, r.a.opts.Home, r.a.opts.Clock.Now())
	r.mu.Lock()
	if name := g.Name(n); errors.Is(why, errGroupDraining) {
		r.held[name] = n.Name // asked again when a member changes
	} else if r.held[name] == n.Name {
		delete(r.held, name)
	}
	r.mu.Unlock()
	if errors.Is(why, errGroupDraining) {
		return false
	}
	if why != nil {
		ans.Outcome, ans.Error = protocol.CallNotVouched, why.Error()
		r.a.log.Warn("a node asked for a Compute Engine call the aggregator does not vouch for", "node", n.Name, "method", c.Method, "request_id", c.ID, "why", why)
		r.a.nodeEvent(n.Name, n.UID, true, protocol.EventComputeCallNotVouched, fmt.Sprintf(
			"The node's agent asked for %s on its VM, and the aggregator did not make the call: %v", c.Method, why))
		r.a.opts.Metrics.ComputeCalls.WithLabelValues(c.Method, protocol.CallNotVouched).Inc()
		r.answer(ctx, n.Name, protocol.AnnotationComputeAnswer, protocol.Encode(ans))
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, relayCallTimeout)
	var err error
	switch c.Method {
	case protocol.CallReportHostAsFaulty:
		approval, _ := protocol.ReadRepairApproval(n)
		ans.Operation, err = r.caller.ReportHostAsFaulty(cctx, inst, c.ID, approval.Behavior, approval.Description())
	case protocol.CallGroupMaintenance:
		ans.Operation, err = r.caller.InstanceGroupMaintenance(cctx, inst, c.ID, c.SubBlock, max(len(group), 1))
		if err != nil && cctx.Err() == nil && compute.NotAtGroupScope(err) {
			r.a.log.Warn("the reservation group's maintenance cannot be asked for at its scope; asking for the VM's", "node", n.Name, "err", err)
			ans.Narrowed, ans.Error = true, err.Error()
			ans.Operation, err = r.caller.PerformMaintenance(cctx, inst, c.ID)
		}
	default:
		ans.Operation, err = r.caller.PerformMaintenance(cctx, inst, c.ID)
	}
	cancel()
	if ctx.Err() != nil {
		return true // the lead is lost: the next leader asks again, with the same request ID
	}
	outcome := "accepted"
	// The acceptance holds the node's place under the caps while this
	// boot lasts, and no longer than VouchedFor (fleet.NodeOf).
	ans.Boot, ans.Until = n.Status.NodeInfo.BootID, r.a.opts.Clock.Now().Add(protocol.VouchedFor).UTC()
	if err != nil {
		ans.Error, ans.Outcome = err.Error(), compute.Outcome(err)
		outcome = ans.Outcome
		r.a.log.Warn(c.Method+" failed", "node", n.Name, "request_id", c.ID, "outcome", outcome, "err", err)
	}
	r.a.opts.Metrics.ComputeCalls.WithLabelValues(c.Method, outcome).Inc()
	if c.Method == protocol.CallReportHostAsFaulty || protocol.ReadAgentState(n).Reason == protocol.ReasonFault {
		// One approval buys one repair's call: answered, it is withdrawn
		// with the answer (the agent's repair goes on without it), and
		// another report needs another approval.
		r.answerPatch(ctx, n.Name, withdrawApproval(protocol.AnnotationComputeAnswer, protocol.Encode(ans)))
		return true
	}
	r.answer(ctx, n.Name, protocol.AnnotationComputeAnswer, protocol.Encode(ans))
	return true
}

// follow reads ans's operation until it ends, and writes how.
func (r *relay) follow(ctx context.Context, n *corev1.Node, ans protocol.ComputeAnswer) {
	inst, err := instanceOf(n, r.a.opts.Home)
	if err != nil {
		return
	}
	ended, err := r.caller.WaitOperation(ctx, inst, ans.Operation)
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(err, compute.ErrPermissionDenied):
		ans.Unfollowed, ans.OperationError = true, err.Error()
	case errors.Is(err, compute.ErrOperationFailed):
		ans.Done, ans.Ended, ans.OperationError = true, ended, err.Error()
	case err != nil:
		r.a.log.Warn("the operation was not followed to its end; following it again", "node", n.Name, "operation", ans.Operation, "err", err)
		if backoff.Wait(ctx, r.a.opts.Clock, backoff.Default.Max) == nil {
			r.mark(n)
		}
		return
	default:
		ans.Done, ans.Ended = true, ended
	}
	r.answer(ctx, n.Name, protocol.AnnotationComputeAnswer, protocol.Encode(ans))
}

// read answers n's VM read (id) with what instances.get says.
func (r *relay) read(ctx context.Context, n *corev1.Node, id string) {
	var sc compute.Scheduling
	inst, err := instanceOf(n, r.a.opts.Home)
	outcome := protocol.CallNotVouched
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, relayCallTimeout)
		sc, err = r.caller.Scheduling(cctx, inst)
		cancel()
		outcome = compute.Outcome(err)
	}
	if ctx.Err() != nil {
		return
	}
	f := sc.Facts(id)
	if err != nil {
		f = protocol.VMFacts{ID: id, Error: err.Error(), PermissionDenied: errors.Is(err, compute.ErrPermissionDenied)}
	}
	if outcome == "" {
		outcome = "accepted"
	}
	r.a.opts.Metrics.ComputeCalls.WithLabelValues("instances.get", outcome).Inc()
	r.answer(ctx, n.Name, protocol.AnnotationVMFacts, protocol.Encode(f))
}

// answer writes one annotation of the aggregator's on the node, retrying
// with backoff until it is written or ctx ends (a Node gone is left).
func (r *relay) answer(ctx context.Context, name, key, value string) {
	r.answerPatch(ctx, name, annotationPatch(key, value))
}

// answerPatch writes patch on the node as answer does; one the API
// server refuses for good (a Node its kubelet filled to the limit) is
// given up, freeing the node's place in the relay's work.
func (r *relay) answerPatch(ctx context.Context, name string, patch []byte) {
	for attempt := 0; ; attempt++ {
		_, err := r.client.PatchNode(ctx, name, types.MergePatchType, patch, fieldManager, "")
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if definitive(err) {
			r.a.log.Warn("the answer to a node's Compute Engine ask was refused by the API server; not written", "node", name, "err", err)
			return
		}
		r.a.log.Warn("cannot write the answer to a node's Compute Engine ask; retrying", "node", name, "err", err)
		if backoff.Wait(ctx, r.a.opts.Clock, backoff.Default.Delay(attempt)) != nil {
			return
		}
	}
}

// refuseObserved says, once per ask, that an observed node's ask is not
// made: its agent acts while the aggregator observes it (the two are told
// apart: set observe-only for both by one source, the chart's observeOnly
// or the policy). The ask is left unanswered, which is no Node write.
func (r *relay) refuseObserved(n *corev1.Node) {
	key := n.Name + "/" + n.Annotations[protocol.AnnotationComputeCall] + "/" + n.Annotations[protocol.AnnotationVMRead]
	r.mu.Lock()
	said := r.observed[key]
	if len(r.observed) >= 10000 {
		r.observed = map[string]bool{} // bounded: an old ask may be said again
	}
	r.observed[key] = true
	r.mu.Unlock()
	if said {
		return
	}
	r.a.log.Warn("observe-only: a node's ask for a Compute Engine call is not made", "node", n.Name)
	r.a.nodeEvent(n.Name, n.UID, true, protocol.EventComputeCallNotVouched,
		"Observe-only: the node's agent asked for a Compute Engine call, which the aggregator does not make while the node is observed only; set observe-only for the agents and the aggregator alike (the chart's observeOnly, or the policy's)")
}
