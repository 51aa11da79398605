package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Relay is the Maintainer of an agent whose node holds no Compute Engine
// permission (the default): it asks for each call on its own VM through
// its Node (protocol.AnnotationComputeCall, AnnotationVMRead), and the
// aggregator's leader, which holds the permissions, checks the ask
// against what it knows, makes the call and writes the answer on the Node,
// then how the call's operation ended. The agent's loop is the same with
// either Maintainer: a call's answer, or why there is none, comes back as
// the direct call's would. New attaches it to its agent (Options.Relay).
type Relay struct {
	a *Agent

	mu sync.Mutex
	// changed is closed, and replaced, at every change of the Node.
	changed chan struct{}
	readID  string // the VM read this process asked for
}

// NewRelay returns a Relay for Options.Relay and Options.Maintainer.
func NewRelay() *Relay { return &Relay{changed: make(chan struct{})} }

// nodeChanged wakes the calls that wait for an answer.
func (r *Relay) nodeChanged() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// PerformMaintenance asks for the VM's performMaintenance.
func (r *Relay) PerformMaintenance(ctx context.Context, requestID string) (string, error) {
	ans, err := r.call(ctx, protocol.ComputeCall{ID: requestID, Method: protocol.CallPerformMaintenance})
	return ans.Operation, err
}

// ReportHostAsFaulty asks for the report of the VM's host.
func (r *Relay) ReportHostAsFaulty(ctx context.Context, requestID, behavior, description string) (string, error) {
	ans, err := r.call(ctx, protocol.ComputeCall{ID: requestID, Method: protocol.CallReportHostAsFaulty, Behavior: behavior, Description: description})
	return ans.Operation, err
}

// PerformGroupMaintenance asks for the maintenance of the VM's
// reservation group. The aggregator counts the group's members itself,
// and where the group's scope cannot be called it calls the VM's own
// performMaintenance and says why (an Event on the Node): the call is
// then answered, not refused.
func (r *Relay) PerformGroupMaintenance(ctx context.Context, requestID string, subBlock bool, _ int) (string, error) {
	ans, err := r.call(ctx, protocol.ComputeCall{ID: requestID, Method: protocol.CallGroupMaintenance, SubBlock: subBlock})
	return ans.Operation, err
}

// WaitOperation returns when the aggregator has seen the operation end.
func (r *Relay) WaitOperation(ctx context.Context, operation string) (time.Time, error) {
	ans, err := await(ctx, r, func(n *corev1.Node) (protocol.ComputeAnswer, bool) {
		a, ok := protocol.ReadComputeAnswer(n)
		return a, ok && a.Operation == operation && (a.Done || a.Unfollowed)
	})
	switch {
	case err != nil:
		return time.Time{}, err
	case ans.Unfollowed:
		return time.Time{}, fmt.Errorf("the aggregator cannot read operation %s: %s: %w", operation, ans.OperationError, compute.ErrPermissionDenied)
	case ans.OperationError != "":
		return ans.Ended, fmt.Errorf("operation %s: %s: %w", operation, ans.OperationError, compute.ErrOperationFailed)
	}
	return ans.Ended, nil
}

// Scheduling asks the aggregator to read the VM with instances.get.
func (r *Relay) Scheduling(ctx context.Context) (compute.Scheduling, error) {
	r.mu.Lock()
	if r.readID == "" {
		r.readID = string(uuid.NewUUID())
	}
	id := r.readID
	r.mu.Unlock()
	f, err := exchange(ctx, r, protocol.AnnotationVMRead, id, func(n *corev1.Node) (protocol.VMFacts, bool) {
		f, ok := protocol.ReadVMFacts(n)
		return f, ok && f.ID == id
	})
	r.mu.Lock()
	r.readID = "" // the next read asks again
	r.mu.Unlock()
	switch {
	case err != nil:
		return compute.Scheduling{}, err
	case f.PermissionDenied:
		return compute.Scheduling{}, fmt.Errorf("the aggregator read the VM: %s: %w", f.Error, compute.ErrPermissionDenied)
	case f.Error != "":
		return compute.Scheduling{}, fmt.Errorf("the aggregator read the VM: %s", f.Error)
	}
	return compute.SchedulingOf(f), nil
}

// call asks for c, unless the Node already asks for it, and waits for the
// aggregator's answer to it.
func (r *Relay) call(ctx context.Context, c protocol.ComputeCall) (protocol.ComputeAnswer, error) {
	ans, err := exchange(ctx, r, protocol.AnnotationComputeCall, protocol.Encode(c), func(n *corev1.Node) (protocol.ComputeAnswer, bool) {
		a, ok := protocol.ReadComputeAnswer(n)
		return a, ok && a.ID == c.ID
	})
	if err != nil {
		return ans, err
	}
	switch ans.Outcome {
	case "":
		if ans.Narrowed {
			r.a.groupScopeUnknown(ans.Error)
		}
		return ans, nil
	case protocol.ManualPermissionDenied:
		return ans, fmt.Errorf("the aggregator's call: %s: %w", ans.Error, compute.ErrPermissionDenied)
	case protocol.ManualRefused, protocol.CallNotVouched:
		return ans, fmt.Errorf("the aggregator's call: %s: %w", ans.Error, compute.ErrRefused)
	}
	return ans, fmt.Errorf("the aggregator's call: %s", ans.Error)
}

// write changes the Node as change says (false: nothing to change),
// retrying conflicts and failures with backoff until ctx ends.
func (r *Relay) write(ctx context.Context, change func(*corev1.Node) bool) error {
	a := r.a
	for attempt := 0; ; attempt++ {
		n, err := a.cachedNode()
		if err == nil {
			n = n.DeepCopy()
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			if !change(n) {
				return nil
			}
			if a.observing() {
				return ErrObserveOnly // the request is a Node write
			}
			if err = a.writeNode(ctx, n); err == nil {
				return nil
			}
		}
		if !apierrors.IsConflict(err) {
			a.log.Warn("cannot ask the aggregator for a Compute Engine call; retrying", "err", err)
		}
		if werr := backoff.Wait(ctx, a.opts.Clock, backoff.Default.Delay(attempt)); werr != nil {
			return errors.Join(werr, err)
		}
	}
}

// exchange asks with value under key on the Node, unless the Node holds
// the answer already or asks the same, and waits for the answer.
func exchange[T any](ctx context.Context, r *Relay, key, value string, answer func(*corev1.Node) (T, bool)) (T, error) {
	if err := r.write(ctx, func(n *corev1.Node) bool {
		if _, answered := answer(n); answered || n.Annotations[key] == value {
			return false
		}
		n.Annotations[key] = value
		return true
	}); err != nil {
		var zero T
		return zero, err
	}
	return await(ctx, r, answer)
}

// await waits until answered reads an answer on the Node, or ctx ends.
func await[T any](ctx context.Context, r *Relay, answered func(*corev1.Node) (T, bool)) (T, error) {
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if n, err := r.a.cachedNode(); err == nil {
			if v, ok := answered(n); ok {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("no answer from the aggregator (is it running, and is its Compute Engine caller on?): %w", ctx.Err())
		case <-changed:
		}
	}
}
