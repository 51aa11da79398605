package testworld

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PodReady reports whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodSeen watches the pod ns/name from now on and returns a wait: it
// returns the first version of the pod seen since PodSeen was called (the
// version listed then, every change after, and a deletion's last state)
// that cond held for, however soon the pod was gone after. Call it before
// what may change the pod (a trigger, a preemption): a wait that starts
// after never sees a pod already deleted.
func (w *World) PodSeen(t testing.TB, ns, name, what string, cond func(*corev1.Pod) bool) func() *corev1.Pod {
	t.Helper()
	ctx := Ctx(t, 2*WaitTimeout)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := w.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := w.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watcher.Stop)
	// seen is the version cond held for; nil with last when the watch
	// ended first.
	type outcome struct{ seen, last *corev1.Pod }
	done := make(chan outcome, 1)
	go func() {
		var last *corev1.Pod
		for i := range list.Items {
			if last = &list.Items[i]; cond(last) {
				done <- outcome{seen: last}
				return
			}
		}
		for ev := range watcher.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if last = p; cond(p) {
					done <- outcome{seen: p}
					return
				}
			}
		}
		done <- outcome{last: last}
	}()
	return func() *corev1.Pod {
		t.Helper()
		select {
		case o := <-done:
			if o.seen == nil {
				t.Fatalf("pod %s/%s: its watch ended before it was %s; last seen: %s", ns, name, what, describe(o.last))
			}
			return o.seen
		case <-time.After(WaitTimeout):
			t.Fatalf("waited %s for pod %s/%s: %s; never seen so", WaitTimeout, ns, name, what)
		}
		return nil
	}
}

// Budget creates the PodDisruptionBudget ns/name over the pods labels
// select, keeping minAvailable of them available, and waits until the
// disruption controller has computed its status for this generation and
// ready holds for it (nil: once computed). It returns that version.
func (w *World) Budget(t testing.TB, ns, name string, labels map[string]string, minAvailable intstr.IntOrString, what string, ready func(*policyv1.PodDisruptionBudget) bool) *policyv1.PodDisruptionBudget {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := w.Client.PolicyV1().PodDisruptionBudgets(ns).Create(Ctx(t, 10*time.Second), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return WaitFor(t, w.Client.PolicyV1().RESTClient(), "poddisruptionbudgets", ns, name, what, func(b *policyv1.PodDisruptionBudget) bool {
		return b.Status.ObservedGeneration == b.Generation && (ready == nil || ready(b))
	})
}
