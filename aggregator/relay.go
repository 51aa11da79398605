package aggregator

// The Compute relay: by default the nodes hold no Compute Engine
// permission, and the leader makes the calls on a node's VM that its
// agent asks for through its Node (protocol/relay.go), once it has checked
// the ask against what it knows of the node (vouch). It follows each
// call's operation to its end, and a new leader takes up what the last
// left: an unanswered ask, an operation not yet seen to end.

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

	mu     sync.Mutex
	queued map[string]bool
	busy   map[string]bool // the calls, reads and follows under way
	// observed: the asks of observed nodes already said (refuseObserved).
	observed map[string]bool
	wake     chan struct{}
	slots    chan struct{}
}

func newRelay(a *Aggregator, caller VMCaller) *relay {
	return &relay{a: a, caller: caller, queued: map[string]bool{}, busy: map[string]bool{}, observed: map[string]bool{},
		wake: make(chan struct{}, 1), slots: make(chan struct{}, relayConcurrency)}
}

// asks says whether n asks the relay for anything.
func asks(n *corev1.Node) bool {
	return n.Annotations[protocol.AnnotationComputeCall] != "" || n.Annotations[protocol.AnnotationVMRead] != ""
}

// mark queues o's node when it asks for something.
func (r *relay) mark(o kube.Object) {
	n, ok := o.(*corev1.Node)
	if !ok || !asks(n) {
		return
	}
	r.mu.Lock()
	r.queued[n.Name] = true
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
			r.start(ctx, wg, "read/"+n.Name+"/"+id, func() { r.read(ctx, n, id) })
		}
	}
	c, ok := protocol.ReadComputeCall(n)
	if !ok {
		return
	}
	ans, answered := protocol.ReadComputeAnswer(n)
	switch {
	case !answered || ans.ID != c.ID:
		r.start(ctx, wg, "call/"+n.Name+"/"+c.ID, func() { r.call(ctx, n, c) })
	case ans.Operation != "" && !ans.Done && !ans.Unfollowed:
		r.start(ctx, wg, "follow/"+n.Name+"/"+ans.Operation, func() { r.follow(ctx, n, ans) })
	}
}

// start runs f once for key, within the relay's concurrency.
func (r *relay) start(ctx context.Context, wg *sync.WaitGroup, key string, f func()) {
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
		select {
		case <-ctx.Done():
			return
		case r.slots <- struct{}{}:
		}
		defer func() { <-r.slots }()
		f()
	})
}

// call makes c on n's VM, if vouch allows it, and writes the answer.
func (r *relay) call(ctx context.Context, n *corev1.Node, c protocol.ComputeCall) {
	ans := protocol.ComputeAnswer{ID: c.ID}
	inst, why := vouch(n, c, r.a.opts.grouping())
	if why != nil {
		ans.Outcome, ans.Error = protocol.CallNotVouched, why.Error()
		r.a.log.Warn("a node asked for a Compute Engine call the aggregator does not vouch for", "node", n.Name, "method", c.Method, "request_id", c.ID, "why", why)
		r.a.nodeEvent(n.Name, n.UID, true, protocol.EventComputeCallNotVouched, fmt.Sprintf(
			"The node's agent asked for %s on its VM, and the aggregator did not make the call: %v", c.Method, why))
		r.a.opts.Metrics.ComputeCalls.WithLabelValues(c.Method, protocol.CallNotVouched).Inc()
		r.answer(ctx, n.Name, protocol.AnnotationComputeAnswer, protocol.Encode(ans))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, relayCallTimeout)
	var err error
	switch c.Method {
	case protocol.CallReportHostAsFaulty:
		approval, _ := protocol.ReadRepairApproval(n)
		ans.Operation, err = r.caller.ReportHostAsFaulty(cctx, inst, c.ID, approval.Behavior, approval.Description())
	case protocol.CallGroupMaintenance:
		ans.Operation, err = r.caller.InstanceGroupMaintenance(cctx, inst, c.ID, c.SubBlock, r.members(n))
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
		return // the lead is lost: the next leader asks again, with the same request ID
	}
	outcome := "accepted"
	if err != nil {
		ans.Error, ans.Outcome = err.Error(), compute.Outcome(err)
		outcome = ans.Outcome
		r.a.log.Warn(c.Method+" failed", "node", n.Name, "request_id", c.ID, "outcome", outcome, "err", err)
	}
	r.a.opts.Metrics.ComputeCalls.WithLabelValues(c.Method, outcome).Inc()
	r.answer(ctx, n.Name, protocol.AnnotationComputeAnswer, protocol.Encode(ans))
}

// follow reads ans's operation until it ends, and writes how.
func (r *relay) follow(ctx context.Context, n *corev1.Node, ans protocol.ComputeAnswer) {
	inst, err := instanceOf(n)
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
	inst, err := instanceOf(n)
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
	patch := annotationPatch(key, value)
	for attempt := 0; ; attempt++ {
		_, err := r.a.opts.Client.PatchNode(ctx, name, types.MergePatchType, patch, fieldManager, "")
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		r.a.log.Warn("cannot write the answer to a node's Compute Engine ask; retrying", "node", name, "err", err)
		if backoff.Wait(ctx, r.a.opts.Clock, backoff.Default.Delay(attempt)) != nil {
			return
		}
	}
}

// members is how many Nodes n's group has, n included, as the leader's
// cache lists them: a group call is made only where Compute Engine counts
// as many hosts in use.
func (r *relay) members(n *corev1.Node) int {
	g := r.a.opts.grouping()
	name := g.Name(n)
	if name == "" {
		return 1
	}
	count := 0
	for _, o := range r.a.nodes.List() {
		if m, ok := o.(*corev1.Node); ok && g.Name(m) == name {
			count++
		}
	}
	return max(count, 1)
}

// instanceOf is the VM n's spec.providerID names, which must carry the
// Node's own name (on Compute Engine a Node is named after its VM): a
// Node recreated by its kubelet under another VM's identity names a VM
// that is not its own.
func instanceOf(n *corev1.Node) (compute.Instance, error) {
	inst, err := compute.InstanceFromProviderID(n.Spec.ProviderID)
	if err != nil {
		return inst, err
	}
	if inst.Name != n.Name {
		return inst, fmt.Errorf("the Node %s names the VM %s in its providerID, not its own", n.Name, inst)
	}
	return inst, nil
}

// vouch says why the leader would not make c for n (nil: it would), and
// the VM the call is made on. A call is made only for the maintenance
// under way on the node, with its request ID, and only as far as what
// the node cannot write allows: a report or a repair's performMaintenance
// only with the aggregator's approval of the repair, for its behavior; a
// voluntary maintenance's call (the VM's own, or its reservation group's,
// whose members the leader counts) on the node's own VM or group.
func vouch(n *corev1.Node, c protocol.ComputeCall, g protocol.Grouping) (compute.Instance, error) {
	inst, err := instanceOf(n)
	if err != nil {
		return inst, err
	}
	st := protocol.ReadAgentState(n)
	if !st.Active() || st.RequestID != c.ID {
		return inst, fmt.Errorf("the node's maintenance under way (request %q) is not the one asked for (request %q)", st.RequestID, c.ID)
	}
	approval, approved := protocol.ReadRepairApproval(n)
	switch {
	case c.Method == protocol.CallReportHostAsFaulty && st.Reason == protocol.ReasonFault && st.RepairCall == protocol.RepairReport:
		if !approved || approval.Behavior != c.Behavior {
			return inst, fmt.Errorf("no repair of behavior %q is approved on the node", c.Behavior)
		}
	case c.Method == protocol.CallPerformMaintenance && st.Reason == protocol.ReasonFault && st.RepairCall == protocol.RepairPerformMaintenance:
		if !approved {
			return inst, errors.New("no repair is approved on the node")
		}
	case c.Method == protocol.CallPerformMaintenance && st.Reason == protocol.ReasonManual:
	case c.Method == protocol.CallGroupMaintenance && st.Reason == protocol.ReasonManual:
		if g.GroupOf(n).Kind != protocol.GroupReservation {
			return inst, errors.New("the node is in no reservation group")
		}
	default:
		return inst, fmt.Errorf("a maintenance of reason %q (repair call %q) does not ask for %s", st.Reason, st.RepairCall, c.Method)
	}
	return inst, nil
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
