package testworld

// What the project may have written on a Node, and a Node's history.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// ProjectState is what the project may write on a Node: its labels,
// annotations and taints, the cordon and its lifecycle conditions, but
// for the perform-maintenance label a person sets.
func ProjectState(n *corev1.Node) string {
	ours := func(k string) bool {
		return strings.HasPrefix(k, protocol.Prefix) || slices.ContainsFunc(protocol.Keys, func(key protocol.Key) bool { return key.Name == k })
	}
	st := map[string]any{"unschedulable": n.Spec.Unschedulable}
	for k, v := range n.Labels {
		if ours(k) && k != protocol.LabelPerformMaintenance {
			st["label "+k] = v
		}
	}
	for k, v := range n.Annotations {
		if ours(k) {
			st["annotation "+k] = v
		}
	}
	for _, t := range n.Spec.Taints {
		if ours(t.Key) {
			st["taint "+t.Key] = t
		}
	}
	for _, c := range n.Status.Conditions {
		if slices.Contains(protocol.NodeConditionTypes, c.Type) {
			st["condition "+string(c.Type)] = c.Status
		}
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// NodeHistory records every version of the Node named name from its
// resourceVersion rv on, until stop.
func (w *World) NodeHistory(t testing.TB, name, rv string) (stop func() []*corev1.Node) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wi, err := w.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*corev1.Node
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified {
				mu.Lock()
				seen = append(seen, n)
				mu.Unlock()
			}
		}
	}()
	stopped := false
	stop = func() []*corev1.Node {
		if !stopped {
			stopped = true
			wi.Stop()
			cancel()
			<-done
		}
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	t.Cleanup(func() { stop() })
	return stop
}
