package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// watchNode starts one watch of the agent's own Node and waits for it.
func (a *Agent) watchNode(ctx context.Context) error {
	a.nodes = kube.NewInformer(a.opts.Client.NodeListWatch(a.opts.NodeName), kube.InformerOptions{Name: "node", Transform: slimOwnNode, Logger: a.log.With("watch", "node"), Clock: a.opts.Clock})
	a.nodes.AddHandlers(kube.OnAnyChange(a.poke))
	if r := a.opts.Relay; r != nil {
		a.nodes.AddHandlers(kube.OnAnyChange(r.nodeChanged))
	}
	a.needs(a.nodes)
	if err := a.nodes.Start(ctx); err != nil {
		return fmt.Errorf("watch node %q: %w", a.opts.NodeName, err)
	}
	return nil
}

// slimOwnNode is slimNode for the agent's own Node, keeping the managed
// fields: who wrote the keys the agent shares with GKE's handler
// (protocol.OwnsLabel). It is one object, and the agent never sends them
// back (reconcile).
func slimOwnNode(obj kube.Object) kube.Object {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj
	}
	managed := n.ManagedFields
	slim := slimNode(n).(*corev1.Node)
	slim.ManagedFields = managed
	return slim
}

// slimNode drops what the agent never reads from its cached Node: the
// managed fields and the status but for nodeInfo, the TPU chips, Ready and
// the lifecycle conditions the agent keeps (the image list alone is often
// tens of kilobytes). The agent updates the Node from this copy; an
// update leaves the status as it is (it is a subresource) and omitted
// managed fields as they are.
func slimNode(obj kube.Object) kube.Object {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj
	}
	n.ManagedFields = nil
	// TPU chips: slice membership, and whether the VM is a TPU VM (its
	// capacity too, before the device plugin registers them).
	var allocatable, capacity corev1.ResourceList
	if tpu, ok := n.Status.Allocatable[protocol.ResourceTPU]; ok {
		allocatable = corev1.ResourceList{protocol.ResourceTPU: tpu}
	}
	if tpu, ok := n.Status.Capacity[protocol.ResourceTPU]; ok {
		capacity = corev1.ResourceList{protocol.ResourceTPU: tpu}
	}
	// Ready (a slice's host that is down), and the lifecycle conditions the
	// agent keeps.
	var kept []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			kept = append(kept, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		} else if slices.Contains(protocol.AgentConditionTypes, c.Type) {
			kept = append(kept, c)
		}
	}
	n.Status = corev1.NodeStatus{NodeInfo: n.Status.NodeInfo, Capacity: capacity, Allocatable: allocatable, Conditions: kept}
	return n
}

// errNodeNotFound: the Node is not (or no longer) in the API server.
var errNodeNotFound = errors.New("node not found")

// cachedNode is the agent's Node from its watch, as the agent left it
// (shown: with the writes an observed node's agent did not make).
func (a *Agent) cachedNode() (*corev1.Node, error) {
	n, err := a.cachedNodeAsIs()
	if err != nil {
		return nil, err
	}
	return a.shown(n), nil
}

// cachedNodeAsIs is the agent's Node from its watch, as the API server has
// it; shared with the cache, never changed.
func (a *Agent) cachedNodeAsIs() (*corev1.Node, error) {
	obj, ok := a.nodes.Get(a.opts.NodeName)
	if !ok {
		return nil, fmt.Errorf("%w: %s", errNodeNotFound, a.opts.NodeName)
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, fmt.Errorf("node cache holds %T", obj)
	}
	return n, nil
}

// ErrNoNode is why WaitForNode still waits: the Node is not registered, or
// the agent may not read it, or the API server does not answer.
var ErrNoNode = errors.New("waiting for the node")

// WaitForNode blocks until the agent can read its Node (the agent may start
// before its Node is registered). Each time the reason it waits changes, it
// logs it and tells waiting (for /healthz); it retries with backoff.Default.
func WaitForNode(ctx context.Context, c NodeGetter, name string, clk clock.Clock, log *slog.Logger, waiting func(error)) (*corev1.Node, error) {
	var last string
	for attempt := 1; ; attempt++ {
		n, err := c.GetNode(ctx, name)
		if err == nil {
			if last != "" {
				log.Info("node found", "node", name)
			}
			return n, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var why error
		switch {
		case apierrors.IsNotFound(err):
			why = fmt.Errorf("%w %q: it is not registered yet (the kubelet registers it)", ErrNoNode, name)
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			why = fmt.Errorf("%w %q: the agent may not read it; check its ServiceAccount's ClusterRole (get, watch nodes): %w", ErrNoNode, name, err)
		default:
			why = fmt.Errorf("%w %q: the API server did not answer: %w", ErrNoNode, name, err)
		}
		waiting(why)
		delay := backoff.Default.Delay(attempt)
		if why.Error() != last {
			log.Warn("waiting for the node", "node", name, "err", why, "retry_in", delay)
			last = why.Error()
		}
		if err := backoff.Wait(ctx, clk, delay); err != nil {
			return nil, err
		}
	}
}

// syncConditions writes, through nodes/status, the node lifecycle
// conditions that st says and the Node does not carry
// (lifecycle.NodeConditions). A write that fails is logged and tried again
// on the next step: the conditions never hold a maintenance back. Until
// the Node cache shows a newer Node than the one a write was decided on,
// no other write is made (the cache is behind that write).
func (a *Agent) syncConditions(ctx context.Context, st lifecycle.State) {
	if a.observing() {
		return // a write of the Node's status
	}
	node, err := a.cachedNode()
	if err != nil {
		return
	}
	want, from := lifecycle.NodeConditions(st), node.ResourceVersion
	if c, ok := a.deviceCondition(); ok {
		want, from = append(want, c), from+"/"+c.Message
	}
	if from == a.conditionsFrom {
		return
	}
	changed := lifecycle.NodeConditionsChanged(node, want, a.opts.Clock.Now())
	if len(changed) == 0 {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": changed}})
	wctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	if err := a.opts.Client.PatchNodeStatus(wctx, a.opts.NodeName, patch); err != nil {
		a.log.Warn("node conditions not written", "err", err)
		return
	}
	a.conditionsFrom = from
}

// observation is what a step reads besides st, the state on node
// (lifecycle.ObservationOf of what the agent fetched: the Node, the
// metadata server's signals, the pods, the drain's and the call's
// progress, the slice); and when the metadata last changed.
func (a *Agent) observation(node *corev1.Node, st lifecycle.State) (lifecycle.Observation, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Clock.Now()
	f := lifecycle.Fetched{Now: now, Signals: a.signals, Node: node, RequestID: a.opts.NewRequestID(), ManualGate: a.opts.ManualGate,
		Pods: a.opts.Pods.List(), Accelerators: a.opts.AcceleratorResources, Claimed: a.claimsAccelerator,
		DrainEnded: a.drainEnded, DrainLeft: a.drainLeft, PreemptionNotice: a.schedule.PreemptionNotice,
		KnownEnd: a.schedule.knownEnd(), Reportable: a.schedule.Reportable, LiveMigrates: a.schedule.LiveMigrates, Performed: a.performResult, Slice: a.sliceView(node, st, now)}
	if f.KnownEnd.KnownEndKnown && !f.KnownEnd.KnownEnd.IsZero() {
		f.KnownEnd.KnownEndNeed = drain.Need(f.Pods, a.opts.Self, a.timing)
	}
	obs, err := lifecycle.ObservationOf(st, f)
	if err != nil {
		a.log.Warn("a value on the Node is unreadable", "err", err)
	}
	return obs, a.changedAt
}

// nodeWriteTimeout bounds each read and write of the agent's own Node,
// client-go's own retries included: a throttled API server answers 429
// with a Retry-After of up to 32 s, and client-go waits and retries it ten
// times, minutes in all, while the VM's stop may be 30 s away. A write
// given up is retried by the next pass, which steps afresh from what the
// node holds then.
var nodeWriteTimeout = 10 * time.Second

// readNode reads the agent's Node from the API server, within
// nodeWriteTimeout.
func (a *Agent) readNode(ctx context.Context) (*corev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	n, err := a.opts.Client.GetNode(ctx, a.opts.NodeName)
	if err != nil {
		return nil, err
	}
	return a.shown(n), nil
}

// writeNode replaces the agent's Node (conditional on its
// resourceVersion), within nodeWriteTimeout.
func (a *Agent) writeNode(ctx context.Context, n *corev1.Node) error {
	ctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	_, err := a.opts.Client.UpdateNode(ctx, n, fieldManager)
	return err
}
