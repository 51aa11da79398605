package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeEvents is an API server's Events, in memory; fail makes the next
// writes fail.
type fakeEvents struct {
	mu      sync.Mutex
	events  map[string]*corev1.Event // namespace/name
	calls   int
	fail    []error
	written chan struct{}
}

func newFakeEvents() *fakeEvents {
	return &fakeEvents{events: map[string]*corev1.Event{}, written: make(chan struct{}, 100)}
}

func (f *fakeEvents) next() error {
	f.calls++
	if len(f.fail) == 0 {
		return nil
	}
	err := f.fail[0]
	f.fail = f.fail[1:]
	return err
}

func (f *fakeEvents) CreateEvent(_ context.Context, e *corev1.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.next(); err != nil {
		return err
	}
	f.events[e.Namespace+"/"+e.Name] = e.DeepCopy()
	f.written <- struct{}{}
	return nil
}

func (f *fakeEvents) PatchEvent(_ context.Context, ns, name string, patch []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.next(); err != nil {
		return err
	}
	e, ok := f.events[ns+"/"+name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, name)
	}
	if err := json.Unmarshal(patch, e); err != nil {
		return err
	}
	f.written <- struct{}{}
	return nil
}

func (f *fakeEvents) list() []*corev1.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Event
	for _, e := range f.events {
		out = append(out, e)
	}
	return out
}

var node = &corev1.ObjectReference{Kind: "Node", Name: "gpu-0", UID: "u1", APIVersion: "v1"}

func TestRecorderCountsRepeatsOnOneEvent(t *testing.T) {
	f := newFakeEvents()
	r := NewRecorder(f, corev1.EventSource{Component: "c", Host: "gpu-0"}, RecorderOptions{SpamKey: repeatKey})
	for range 3 {
		r.Event(node, corev1.EventTypeWarning, "Bad", "same words")
	}
	r.Event(node, corev1.EventTypeNormal, "Good", "other words")
	r.Shutdown()
	got := map[string]int32{}
	for _, e := range f.list() {
		if e.Namespace != "default" || e.InvolvedObject != *node || e.Source.Host != "gpu-0" || e.ReportingController != "c" {
			t.Errorf("event %+v", e)
		}
		got[e.Reason+"/"+e.Message] += e.Count
	}
	want := map[string]int32{"Bad/same words": 3, "Good/other words": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(f.list()) != 2 {
		t.Errorf("events %v (in %d objects), want %v in 2", got, len(f.list()), want)
	}
}

// TestRecorderLimitsEachSpamKey: a burst of 25 writes per key, then none
// for five minutes; another key is not held back.
func TestRecorderLimitsEachSpamKey(t *testing.T) {
	f := newFakeEvents()
	r := NewRecorder(f, corev1.EventSource{Component: "c"}, RecorderOptions{})
	for i := range 40 {
		r.Event(node, corev1.EventTypeWarning, "Noisy", fmt.Sprint("message ", i)) // one spam key: no message in it
	}
	r.Event(node, corev1.EventTypeNormal, "Lifecycle", "still written")
	r.Shutdown()
	noisy, lifecycle := 0, 0
	for _, e := range f.list() {
		switch e.Reason {
		case "Noisy":
			noisy++
		case "Lifecycle":
			lifecycle++
		}
	}
	if noisy != spamBurst || lifecycle != 1 {
		t.Errorf("%d noisy and %d lifecycle events written, want %d and 1", noisy, lifecycle, spamBurst)
	}
}

// TestRecorderRetriesAndRecreates: a failed write is retried; a repeat of
// an Event that has expired is written anew; an invalid one is dropped.
func TestRecorderRetriesAndRecreates(t *testing.T) {
	f := newFakeEvents()
	f.fail = []error{apierrors.NewServiceUnavailable("down")}
	r := NewRecorder(f, corev1.EventSource{Component: "c"}, RecorderOptions{})
	defer r.Shutdown()
	r.Event(node, corev1.EventTypeNormal, "A", "a")
	<-f.written
	f.mu.Lock()
	calls := f.calls
	f.mu.Unlock()
	if calls != 2 {
		t.Errorf("%d calls, want 2 (one failure, one retry)", calls)
	}
	f.mu.Lock()
	clear(f.events) // the Event expired
	f.mu.Unlock()
	r.Event(node, corev1.EventTypeNormal, "A", "a")
	<-f.written
	if l := f.list(); len(l) != 1 || l[0].Count != 1 {
		t.Errorf("after expiry: %v, want one new Event", l)
	}
	f.mu.Lock()
	f.fail = []error{apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "x", nil)}
	f.mu.Unlock()
	r.Event(node, corev1.EventTypeNormal, "B", "b")
	r.Event(node, corev1.EventTypeNormal, "C", "c")
	<-f.written
	for _, e := range f.list() {
		if e.Reason == "B" {
			t.Error("an invalid Event was retried")
		}
	}
}

func TestRecorderDropsAfterShutdown(t *testing.T) {
	f := newFakeEvents()
	r := NewRecorder(f, corev1.EventSource{Component: "c"}, RecorderOptions{})
	r.Shutdown()
	r.Event(node, corev1.EventTypeNormal, "Late", "late")
	r.Shutdown()
	if len(f.list()) != 0 {
		t.Errorf("events after shutdown: %v", f.list())
	}
}
