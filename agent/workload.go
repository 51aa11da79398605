package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// The workload notice: every pod on the node is told of the node's
// maintenance before SIGTERM, where it can read it without API access (an
// annotation the downward API exposes as a file) and where a controller
// can (a pod condition). Pending while a notice is pending; starting once
// the maintenance begins, for a pod with a checkpoint lead, with when it
// will be asked to stop; gone when the notice is. Only the pods of this
// node are written, and on them only the notice (the admission policy
// holds the agent to it).

// setNotice records the node's side of the notice and wakes the notifier
// when it changed, or was not known before (the first decision).
func (a *Agent) setNotice(t lifecycle.WorkloadTarget) {
	a.mu.Lock()
	changed := !a.noticeKnown || t != a.notice
	a.notice, a.noticeKnown = t, true
	a.mu.Unlock()
	if changed {
		a.pokeNotifier()
	}
}

func (a *Agent) pokeNotifier() {
	select {
	case a.notifyWake <- struct{}{}:
	default:
	}
}

// notify keeps every pod's notice as the node's, until ctx ends: on every
// change of the node's notice or of its pods, and again after a failure.
func (a *Agent) notify(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.notifyWake:
		case <-retry:
		}
		retry = nil
		if err := a.notifyPods(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("workload notice not written; retrying", "err", err, "retry_in", a.opts.RetryInterval)
			retry = a.opts.Clock.After(a.opts.RetryInterval)
		}
	}
}

// notifyPods writes the notice on every pod whose annotation differs. Until
// the first decision it writes nothing: a restarted agent (an upgrade, a
// crash) must not take its pods' notice away before it has read the VM's.
func (a *Agent) notifyPods(ctx context.Context) error {
	a.mu.Lock()
	t, known := a.notice, a.noticeKnown
	a.mu.Unlock()
	if !known || a.observing() {
		return nil // an observed node's pods are not told
	}
	var firstErr error
	pods := a.opts.Pods.List()
	// The time each pod is told is the time the drain asks it to stop: the
	// same plan, with the drain's own timing and its own pod skipped.
	evictAt := map[types.UID]time.Time{}
	if t.Phase == protocol.NoticeStarting && !t.DrainStart.IsZero() {
		for _, planned := range drain.Plan(pods, a.opts.Self, a.timing, t.DrainStart, t.Deadline) {
			evictAt[planned.Pod.UID] = planned.NotBefore
		}
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, _, err := protocol.CheckpointLead(p.Annotations); err != nil && !a.badLead[p.UID] {
			a.badLead[p.UID] = true
			a.log.Warn("checkpoint lead not understood; the pod has none", "pod", p.Namespace+"/"+p.Name, "err", err)
			a.opts.Events.NodeEvent(true, protocol.EventCheckpointLeadInvalid, fmt.Sprintf("Pod %s/%s: %v; it is told of a maintenance and asked to stop as a pod without a lead", p.Namespace, p.Name, err))
		}
		at, planned := evictAt[p.UID]
		if !planned {
			at = drain.EvictAt(p, t.DrainStart, t.Deadline.Add(-a.timing.Margin))
		}
		want := t.NoticeFor(p, at)
		if p.Annotations[protocol.PodAnnotationNotice] == want {
			continue
		}
		if err := a.writeNotice(ctx, p, want); err != nil && !apierrors.IsNotFound(err) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// writeNotice sets (or, for "", removes) the pod's notice: the condition
// first, then the annotation, whose value is what the cache compares.
func (a *Agent) writeNotice(ctx context.Context, p *corev1.Pod, text string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeWriteTimeout)
	defer cancel()
	cond := map[string]any{"type": protocol.PodConditionMaintenance, "$patch": "delete"}
	if text != "" {
		n, _ := protocol.ParseWorkloadNotice(text)
		reason := "Pending"
		switch n.Phase {
		case protocol.NoticeStarting:
			reason = "Starting"
		case protocol.NoticeOngoing:
			reason = "Ongoing"
		}
		cond = map[string]any{"type": protocol.PodConditionMaintenance, "status": corev1.ConditionTrue, "reason": reason,
			"message": text, "lastTransitionTime": a.opts.Clock.Now().UTC().Format(time.RFC3339)}
	}
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	if err := a.opts.Client.PatchPod(ctx, p.Namespace, p.Name, types.StrategicMergePatchType, status, "status"); err != nil {
		return err
	}
	var value any // null removes the annotation
	if text != "" {
		value = text
	}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.PodAnnotationNotice: value}}})
	return a.opts.Client.PatchPod(ctx, p.Namespace, p.Name, types.MergePatchType, meta, "")
}
