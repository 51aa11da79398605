package drain

// One pod's eviction, or its deletion where a forced drain must: the API calls.

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// evict asks the Eviction API to evict p with grace; a throttled call
// comes back with the wait the API server asked for (0: none said), a
// failed one with its error.
func (d *Drainer) evict(ctx context.Context, p *corev1.Pod, grace time.Duration) (outcome string, retryAfter time.Duration, failed error) {
	secs := int64(grace / time.Second)
	err := d.opts.Client.Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case err == nil:
		return OutcomeEvicted, 0, nil
	case apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause):
		return OutcomeBlocked, 0, nil
	case apierrors.IsTooManyRequests(err):
		secs, _ := apierrors.SuggestsClientDelay(err)
		return OutcomeThrottled, time.Duration(secs) * time.Second, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or a different pod of the same name (recreated).
		return OutcomeGone, 0, nil
	default:
		d.opts.Logger.Warn("eviction failed", "pod", klogRef(p), "err", err)
		return OutcomeError, 0, err
	}
}

// escalationCallTimeout bounds each call of an escalation: the VM's stop
// does not wait, and client-go would wait out a throttled API server's
// Retry-After (up to 32 s under API priority and fairness) ten times.
var escalationCallTimeout = 10 * time.Second

// delete deletes a pod whose eviction kept being refused until
// deadline - grace - EscalationLead, after setting its DisruptionTarget condition (why). A
// condition that cannot be set does not hold the delete back: the pod
// must stop before the VM does.
func (d *Drainer) delete(ctx context.Context, p *corev1.Pod, grace time.Duration, why Disruption) string {
	pctx, cancel := context.WithTimeout(ctx, escalationCallTimeout)
	err := d.opts.Client.PatchPod(pctx, p.Namespace, p.Name, types.StrategicMergePatchType, disruptionPatch(p, why, d.opts.Clock.Now()), "status")
	cancel()
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return OutcomeGone
		}
		d.opts.Logger.Warn("DisruptionTarget condition not set before the delete", "pod", klogRef(p), "err", err)
	}
	secs := int64(grace / time.Second)
	dctx, cancel := context.WithTimeout(ctx, escalationCallTimeout)
	err = d.opts.Client.DeletePod(dctx, p.Namespace, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	cancel()
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		d.opts.Logger.Warn("delete after refused evictions failed", "pod", klogRef(p), "err", err)
		return OutcomeError
	}
	return OutcomeEscalated
}

// disruptionPatch sets p's DisruptionTarget condition to True with why, on
// p's UID only (a pod recreated under its name is another pod).
func disruptionPatch(p *corev1.Pod, why Disruption, now time.Time) []byte {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": p.UID},
		"status": map[string]any{"conditions": []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: why.Reason, Message: why.Message, LastTransitionTime: metav1.NewTime(now)}}},
	})
	return patch
}
