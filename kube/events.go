package kube

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// Recorder writes core/v1 Events in the background, with client-go's
// recorder: recording never blocks; a repeat of an Event (the same source,
// object, type, reason and message) increments the count of the Event
// already written; each spam key may write a burst of 25 Events, then one
// per five minutes; a failed write is retried (12 tries, 10 s apart).
// Events are never combined across messages ("combined from similar
// events"): a person reads each message as it was written.
//
// Call Shutdown when done: it writes what is still queued first.
type Recorder struct {
	b record.EventBroadcaster
	r record.EventRecorder
	// recorded and written count the Events recorded and the writes the
	// sink ended (a repeat is one write; a failed write retried is more).
	recorded, written atomic.Int64
	wrote             chan struct{} // a write ended
}

// NewRecorder starts a recorder that writes to sink as source; spamKey
// groups the Events that share one rate limit (nil: the source, object,
// type and reason).
func NewRecorder(sink record.EventSink, source corev1.EventSource, spamKey func(*corev1.Event) string) *Recorder {
	if spamKey == nil {
		spamKey = reasonKey
	}
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		SpamKeyFunc: spamKey,
		KeyFunc: func(e *corev1.Event) (string, string) {
			return repeatKey(e), e.Message
		},
	}))
	rec := &Recorder{b: b, r: b.NewRecorder(scheme, source), wrote: make(chan struct{}, 1)}
	b.StartRecordingToSink(countingSink{sink, rec})
	return rec
}

// Event records an Event about the object ref; typ is
// corev1.EventTypeNormal or corev1.EventTypeWarning.
func (r *Recorder) Event(ref *corev1.ObjectReference, typ, reason, message string) {
	r.recorded.Add(1)
	r.r.Event(ref, typ, reason, message)
}

// shutdownFlush bounds how long Shutdown waits for the queued Events to
// be written: an agent stopping with its VM has seconds, and its last
// Events (the drain's end, the VM's stop) are the ones people look for.
const shutdownFlush = 5 * time.Second

// Shutdown stops recording, once every Event recorded has been written
// (or its write has ended), or after shutdownFlush. An Event the
// recorder's spam filter dropped is never written, and client-go does not
// say which it dropped: once one was, every later Shutdown waits out the
// bound.
// client-go's own Shutdown drops what it has not written yet, so the wait
// comes first.
func (r *Recorder) Shutdown() {
	defer r.b.Shutdown()
	bound := time.NewTimer(shutdownFlush)
	defer bound.Stop()
	for r.written.Load() < r.recorded.Load() {
		select {
		case <-r.wrote:
		case <-bound.C:
			return
		}
	}
}

// countingSink counts the writes of sink that ended.
type countingSink struct {
	record.EventSink
	r *Recorder
}

func (s countingSink) ended() {
	s.r.written.Add(1)
	select {
	case s.r.wrote <- struct{}{}:
	default:
	}
}

func (s countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	defer s.ended()
	return s.EventSink.Create(e)
}

func (s countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	defer s.ended()
	return s.EventSink.Update(e)
}

func (s countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	defer s.ended()
	return s.EventSink.Patch(e, data)
}

func objectKey(e *corev1.Event) []string {
	o := e.InvolvedObject
	return []string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type}
}

func reasonKey(e *corev1.Event) string { return strings.Join(append(objectKey(e), e.Reason), "\x00") }

// repeatKey: Events with the same key are one Event, counted.
func repeatKey(e *corev1.Event) string {
	return strings.Join(append(objectKey(e), e.Reason, e.Message), "\x00")
}

// NodeEvents records a node agent's Kubernetes Events on its Node.
//
// Only repeats of the very same Event (reason and message) share a rate
// limit: a burst of warnings must not silence the lifecycle Events after
// it. The agent keeps its noisy warnings rare at the source (one per key
// and change of condition), so every lifecycle Event is recorded.
type NodeEvents struct {
	r   *Recorder
	ref *corev1.ObjectReference
}

// NewNodeEvents returns a recorder for the Node named nodeName (whose UID
// is uid) that writes to sink (a Client's EventSink), as component. Call
// Shutdown when done.
func NewNodeEvents(sink record.EventSink, component, nodeName string, uid types.UID) *NodeEvents {
	return &NodeEvents{
		r:   NewRecorder(sink, corev1.EventSource{Component: component, Host: nodeName}, repeatKey),
		ref: &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: uid, APIVersion: "v1"},
	}
}

// NodeEvent records one Event.
func (e *NodeEvents) NodeEvent(warning bool, reason, message string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	e.r.Event(e.ref, typ, reason, message)
}

// Shutdown stops recording.
func (e *NodeEvents) Shutdown() { e.r.Shutdown() }

// eventWrite bounds one write of an Event (client-go's sink takes no
// context).
const eventWrite = 30 * time.Second

// EventSink writes the Events of a Recorder through c.
func (c *Client) EventSink() record.EventSink { return eventSink{c} }

type eventSink struct{ c *Client }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventWrite)
	defer cancel()
	return s.c.events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventWrite)
	defer cancel()
	return s.c.events(e.Namespace).Update(ctx, e, metav1.UpdateOptions{})
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), eventWrite)
	defer cancel()
	return s.c.events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
