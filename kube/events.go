package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// EventWriter is where a Recorder writes Events: it creates one, or
// patches an existing one's count (a JSON merge patch).
type EventWriter interface {
	CreateEvent(ctx context.Context, e *corev1.Event) error
	PatchEvent(ctx context.Context, namespace, name string, mergePatch []byte) error
}

// Recorder writes core/v1 Events in the background, as client-go's event
// recorder does, in a few hundred lines rather than the megabyte its
// strategic-merge machinery costs the agent's binary:
//
//   - Recording never blocks: an Event waits in a queue of maxQueued, and
//     one that finds the queue full is dropped (and logged).
//   - A repeat of an Event (the same source, object, type, reason and
//     message) increments the count and lastTimestamp of the Event already
//     written, rather than writing another.
//   - Each spam key (SpamKey; by default the source, object, type and
//     reason) may write a burst of 25 Events, then one per five minutes.
//   - A write that fails is retried with backoff, up to 12 tries; one the
//     API server refuses as invalid or forbidden is not.
//
// Call Shutdown when done: it writes what is queued (for at most
// flushTimeout) and stops.
type Recorder struct {
	w       EventWriter
	source  corev1.EventSource
	spamKey func(*corev1.Event) string
	clock   clock.Clock
	log     *slog.Logger

	mu     sync.Mutex
	closed bool
	queue  chan *corev1.Event
	stop   context.CancelFunc
	done   chan struct{}

	// The worker's alone.
	written *lru.Cache // repeat key -> writtenEvent
	limits  *lru.Cache // spam key -> *rate.Limiter
}

// RecorderOptions configure a Recorder; zero values take the defaults.
type RecorderOptions struct {
	// SpamKey groups the Events that share one rate limit.
	SpamKey func(*corev1.Event) string
	Clock   clock.Clock
	Logger  *slog.Logger
}

type writtenEvent struct {
	namespace, name string
	count           int32
}

const (
	maxQueued    = 1000
	maxCached    = 4096
	maxTries     = 12
	spamBurst    = 25
	spamInterval = 5 * time.Minute
	flushTimeout = 10 * time.Second
)

// NewRecorder starts a recorder that writes to w as source.
func NewRecorder(w EventWriter, source corev1.EventSource, o RecorderOptions) *Recorder {
	if o.SpamKey == nil {
		o.SpamKey = defaultSpamKey
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Recorder{w: w, source: source, spamKey: o.SpamKey, clock: o.Clock, log: o.Logger,
		queue: make(chan *corev1.Event, maxQueued), stop: stop, done: make(chan struct{}),
		written: lru.New(maxCached), limits: lru.New(maxCached)}
	go r.run(ctx)
	return r
}

// Event records an Event about the object ref; typ is
// corev1.EventTypeNormal or corev1.EventTypeWarning.
func (r *Recorder) Event(ref *corev1.ObjectReference, typ, reason, message string) {
	now := metav1.NewTime(r.clock.Now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // where Events about cluster-scoped objects go
	}
	e := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              r.source,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.queue <- e:
	default:
		r.log.Warn("event queue full; event dropped", "reason", reason, "object", ref.Name)
	}
}

// Shutdown writes the Events queued (for at most flushTimeout), then
// stops. Events recorded after it are dropped.
func (r *Recorder) Shutdown() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	t := r.clock.NewTimer(flushTimeout)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C():
	}
	r.stop()
	<-r.done
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	for e := range r.queue {
		if ctx.Err() != nil {
			continue // shutting down past the flush timeout: drop what is left
		}
		r.record(ctx, e)
	}
}

// record writes e, or counts it on the Event written for its repeats.
func (r *Recorder) record(ctx context.Context, e *corev1.Event) {
	spam := r.spamKey(e)
	l, ok := r.limits.Get(spam)
	if !ok {
		l = rate.NewLimiter(rate.Every(spamInterval), spamBurst)
		r.limits.Add(spam, l)
	}
	if !l.(*rate.Limiter).AllowN(e.LastTimestamp.Time, 1) {
		return
	}
	key := repeatKey(e)
	prev, seen := r.written.Get(key)
	write := func(ctx context.Context) error {
		if seen {
			w := prev.(writtenEvent)
			patch, _ := json.Marshal(map[string]any{"count": w.count + 1, "lastTimestamp": e.LastTimestamp})
			err := r.w.PatchEvent(ctx, w.namespace, w.name, patch)
			if err == nil {
				r.written.Add(key, writtenEvent{w.namespace, w.name, w.count + 1})
				return nil
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
			seen = false // gone (expired): write it anew
		}
		if err := r.w.CreateEvent(ctx, e); err != nil {
			return err
		}
		r.written.Add(key, writtenEvent{e.Namespace, e.Name, 1})
		return nil
	}
	pace := retryBackoff
	for try := 1; ; try++ {
		err := write(ctx)
		if err == nil {
			return
		}
		if try == maxTries || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsAlreadyExists(err) {
			r.log.Warn("event not written", "reason", e.Reason, "object", e.InvolvedObject.Name, "tries", try, "err", err)
			return
		}
		if sleep(ctx, r.clock, pace.Step()) != nil {
			return
		}
	}
}

func objectKey(e *corev1.Event) []string {
	o := e.InvolvedObject
	return []string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type, e.Reason}
}

// defaultSpamKey: the same source, object, type and reason.
func defaultSpamKey(e *corev1.Event) string { return strings.Join(objectKey(e), "\x00") }

// repeatKey: the same Event, message included.
func repeatKey(e *corev1.Event) string {
	return strings.Join(append(objectKey(e), e.Message), "\x00")
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
// is uid) that writes to w (a Client), as component. Call Shutdown when
// done.
func NewNodeEvents(w EventWriter, component, nodeName string, uid types.UID) *NodeEvents {
	return &NodeEvents{
		r: NewRecorder(w, corev1.EventSource{Component: component, Host: nodeName},
			RecorderOptions{SpamKey: repeatKey}),
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

// Shutdown writes what is queued, then stops.
func (e *NodeEvents) Shutdown() { e.r.Shutdown() }
