package testworld

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitTimeout bounds every wait of this file: far longer than anything
// takes on a loaded 2-core machine, so that only a change that never comes
// fails a test.
const WaitTimeout = 3 * time.Minute

// The waits below observe the world through a watch (a list, then every
// change), never by polling: a condition is checked on the objects as
// listed and then on every version the API server sends, so a transient
// state is seen too.

// WaitFor waits until cond holds for the object name in namespace ns ("" for
// a cluster-scoped one) of resource, read through c (a group's REST
// client: w.Client.CoreV1().RESTClient()), and returns the version it held
// for. It fails t, naming what and the last version seen, after
// WaitTimeout.
func WaitFor[T runtime.Object](t testing.TB, c cache.Getter, resource, ns, name, what string, cond func(T) bool) T {
	t.Helper()
	var zero, found, last T
	lw := cache.NewListWatchFromClient(c, resource, ns, fields.OneTermEqualSelector("metadata.name", name))
	check := func(obj runtime.Object) bool {
		o, ok := obj.(T)
		if !ok {
			return false
		}
		last = o
		if cond(o) {
			found = o
			return true
		}
		return false
	}
	watchUntil(t, lw, reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T), func(store cache.Store, ev *watch.Event) bool {
		if ev != nil {
			return ev.Type != watch.Deleted && check(ev.Object)
		}
		for _, obj := range store.List() {
			if check(obj.(runtime.Object)) {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("%s %s/%s: %s; last seen: %s", resource, ns, name, what, describe(last))
	})
	return found
}

// WaitNode waits until cond holds for the Node name, and returns that
// version of it.
func (w *World) WaitNode(t testing.TB, name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	return WaitFor(t, w.Client.CoreV1().RESTClient(), "nodes", "", name, what, cond)
}

// WaitPod waits until cond holds for the pod ns/name, and returns that
// version of it.
func (w *World) WaitPod(t testing.TB, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	return WaitFor(t, w.Client.CoreV1().RESTClient(), "pods", ns, name, what, cond)
}

// WaitNodes waits until cond holds for every Node of names at once.
func (w *World) WaitNodes(t testing.TB, names []string, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var failing []string
	lw := cache.NewListWatchFromClient(w.Client.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	watchUntil(t, lw, &corev1.Node{}, func(store cache.Store, _ *watch.Event) bool {
		failing = failing[:0]
		held := map[string]bool{}
		for _, obj := range store.List() {
			if n := obj.(*corev1.Node); want[n.Name] && cond(n) {
				held[n.Name] = true
			}
		}
		for _, n := range names {
			if !held[n] {
				failing = append(failing, n)
			}
		}
		return len(failing) == 0
	}, func() string { return fmt.Sprintf("nodes %v: %s; not yet on %v", names, what, failing) })
}

// WaitPods waits until cond holds for the pods of namespace ns that
// selector (a label selector) selects.
func (w *World) WaitPods(t testing.TB, ns, selector, what string, cond func([]*corev1.Pod) bool) {
	t.Helper()
	lw := cache.NewFilteredListWatchFromClient(w.Client.CoreV1().RESTClient(), "pods", ns, func(o *metav1.ListOptions) { o.LabelSelector = selector })
	var seen int
	watchUntil(t, lw, &corev1.Pod{}, func(store cache.Store, _ *watch.Event) bool {
		var pods []*corev1.Pod
		for _, obj := range store.List() {
			pods = append(pods, obj.(*corev1.Pod))
		}
		seen = len(pods)
		return cond(pods)
	}, func() string { return fmt.Sprintf("pods %s in %s: %s; %d pods seen", selector, ns, what, seen) })
}

// WaitNamespaceGone waits until the namespace name does not exist (an
// earlier test's, being deleted, would refuse new objects).
func (w *World) WaitNamespaceGone(t testing.TB, name string) {
	t.Helper()
	lw := cache.NewListWatchFromClient(w.Client.CoreV1().RESTClient(), "namespaces", "", fields.OneTermEqualSelector("metadata.name", name))
	watchUntil(t, lw, &corev1.Namespace{}, func(store cache.Store, _ *watch.Event) bool {
		return len(store.List()) == 0
	}, func() string { return "namespace " + name + " gone" })
}

// WaitRunning waits until at least n pods bound to node are Running and
// not being deleted.
func (w *World) WaitRunning(t testing.TB, node string, n int) {
	t.Helper()
	running := 0
	lw := cache.NewListWatchFromClient(w.Client.CoreV1().RESTClient(), "pods", "", fields.OneTermEqualSelector("spec.nodeName", node))
	watchUntil(t, lw, &corev1.Pod{}, func(store cache.Store, _ *watch.Event) bool {
		running = 0
		for _, obj := range store.List() {
			if p := obj.(*corev1.Pod); p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running >= n
	}, func() string { return fmt.Sprintf("%d pods running on %s; %d are", n, node, running) })
}

// WaitEvent waits for an Event with reason about the Node node (this Node
// object: one of the same name from before is another; an Event that names
// no UID counts) whose message says every one of parts, and returns it.
func (w *World) WaitEvent(t testing.TB, node, reason string, parts ...string) *corev1.Event {
	t.Helper()
	n := w.WaitNode(t, node, "exists", func(*corev1.Node) bool { return true })
	return w.waitEvent(t, "Node", "", node, n.UID, reason, parts...)
}

// WaitObjectEvent waits for an Event with reason about the object of kind
// namespace/name whose message holds every one of parts, and returns it.
func (w *World) WaitObjectEvent(t testing.TB, kind, namespace, name, reason string, parts ...string) *corev1.Event {
	t.Helper()
	return w.waitEvent(t, kind, namespace, name, "", reason, parts...)
}

// waitEvent is WaitEvent and WaitObjectEvent: uid, where set, is the
// object's, and an Event naming another UID is not its.
func (w *World) waitEvent(t testing.TB, kind, namespace, name string, uid types.UID, reason string, parts ...string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	var seen []string
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", kind), fields.OneTermEqualSelector("involvedObject.name", name),
		fields.OneTermEqualSelector("reason", reason))
	lw := cache.NewListWatchFromClient(w.Client.CoreV1().RESTClient(), "events", namespace, sel)
	says := func(obj any) bool {
		e, ok := obj.(*corev1.Event)
		if !ok || uid != "" && e.InvolvedObject.UID != "" && e.InvolvedObject.UID != uid {
			return false
		}
		seen = append(seen, e.Message)
		for _, p := range parts {
			if !strings.Contains(e.Message, p) {
				return false
			}
		}
		found = e
		return true
	}
	watchUntil(t, lw, &corev1.Event{}, func(store cache.Store, ev *watch.Event) bool {
		if ev != nil {
			return says(ev.Object)
		}
		for _, obj := range store.List() {
			if says(obj) {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("a %s Event on %s %s saying %q; seen: %q", reason, kind, name, parts, seen)
	})
	return found
}

// watchUntil lists and watches lw until done says so: once with the listed
// store (ev nil), then after each change with the store and the change. It
// fails t after WaitTimeout with what() in the message.
func watchUntil(t testing.TB, lw cache.ListerWatcher, obj runtime.Object, done func(store cache.Store, ev *watch.Event) bool, what func() string) {
	t.Helper()
	var store cache.Store
	_, err := watchtools.UntilWithSync(Ctx(t, WaitTimeout), lw, obj,
		func(s cache.Store) (bool, error) {
			store = s
			return done(s, nil), nil
		},
		func(ev watch.Event) (bool, error) { return done(store, &ev), nil })
	if err != nil {
		t.Fatalf("waited %s for %s: %v", WaitTimeout, what(), err)
	}
}

// describe says what a test needs to see of an object that never held.
func describe(obj runtime.Object) string {
	switch o := obj.(type) {
	case *corev1.Node:
		if o != nil {
			return fmt.Sprintf("labels %v annotations %v taints %v unschedulable %t", o.Labels, o.Annotations, o.Spec.Taints, o.Spec.Unschedulable)
		}
	case *corev1.Pod:
		if o != nil {
			return fmt.Sprintf("phase %s deleting %t annotations %v conditions %v", o.Status.Phase, o.DeletionTimestamp != nil, o.Annotations, o.Status.Conditions)
		}
	}
	if reflect.ValueOf(obj).IsNil() {
		return "(none)"
	}
	return fmt.Sprintf("%+v", obj)
}

// Settled is the metric's value once it is want, or its value after
// WaitTimeout: a component counts a decision once its write has returned,
// a moment after a watch shows the object changed. (An in-process counter
// has no watch; it is read again every 20 ms.)
func Settled(t testing.TB, c prometheus.Collector, want float64) float64 {
	t.Helper()
	var got float64
	_ = wait.PollUntilContextTimeout(Ctx(t, WaitTimeout), 20*time.Millisecond, WaitTimeout, true, func(context.Context) (bool, error) {
		got = testutil.ToFloat64(c)
		return got == want, nil
	})
	return got
}

// HistogramCount is how many values h has observed.
func HistogramCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

// Exposition is what a scrape of g reads, in Prometheus's text format.
func Exposition(t testing.TB, g prometheus.Gatherer) string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
