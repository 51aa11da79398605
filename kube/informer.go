package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// Handlers are told of each change an Informer sees, in order, from its
// goroutine: they must not block.
type Handlers struct {
	Add    func(obj Object)
	Update func(old, cur Object)
	Delete func(obj Object)
}

// Informer keeps the objects of a ListWatch in memory: one list, then one
// watch from the list's version, watched again from the last version seen
// when the API server ends it, and listed again (with backoff) when the
// watch fails or the version has expired. A list that finds an object
// changed, gone or new tells the handlers as the watch would have.
//
// It is client-go's informer for the few small sets the binaries watch (a
// Node, its pods, a slice's Nodes, budgets, a ConfigMap): no resync, no
// indexes, no shared processor.
type Informer struct {
	lw        ListWatch
	transform func(Object) Object
	handlers  []Handlers
	log       *slog.Logger
	clock     clock.Clock
	// version is the last version seen, and expired says the API server
	// no longer has it; Run's alone.
	version string
	expired bool

	mu      sync.RWMutex
	objects map[string]Object // by Key

	synced chan struct{} // closed once the first list is kept and told
}

// NewInformer returns an Informer of lw; transform, when not nil, is
// applied to every object before it is kept (it may change it in place).
// A failed watch is logged to log (nil: nowhere). Add handlers, then Run.
func NewInformer(lw ListWatch, transform func(Object) Object, log *slog.Logger) *Informer {
	if transform == nil {
		transform = func(o Object) Object { return o }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Informer{lw: lw, transform: transform, log: log, clock: clock.RealClock{},
		objects: map[string]Object{}, synced: make(chan struct{})}
}

// AddHandlers adds h; call it before Run.
func (i *Informer) AddHandlers(h Handlers) { i.handlers = append(i.handlers, h) }

// OnAnyChange is a handler that calls f on every change.
func OnAnyChange(f func()) Handlers {
	return Handlers{Add: func(Object) { f() }, Update: func(_, _ Object) { f() }, Delete: func(Object) { f() }}
}

// Key is the key of o in an Informer: namespace/name, or name.
func Key(o metav1.Object) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}

// HasSynced reports whether the first list has been kept and told.
func (i *Informer) HasSynced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// List returns the objects as last seen, in no order.
func (i *Informer) List() []Object {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]Object, 0, len(i.objects))
	for _, o := range i.objects {
		out = append(out, o)
	}
	return out
}

// Get returns the object of key (see Key), as last seen.
func (i *Informer) Get(key string) (Object, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	o, ok := i.objects[key]
	return o, ok
}

// Start runs the Informer until ctx ends and returns once it has synced;
// ctx's error when ctx ended first.
func (i *Informer) Start(ctx context.Context) error {
	go i.Run(ctx)
	select {
	case <-i.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watch timeouts: the API server ends each watch after a random time in
// this range (spread, so that many agents do not watch again in step).
const (
	minWatchTimeout = 5 * time.Minute
	// shortWatch: a watch that ends sooner than this, having seen
	// nothing, counts as a failure (no tight loop of watches).
	shortWatch = time.Second
)

// errWatchEnded: a watch ended at once, having seen nothing.
var errWatchEnded = errors.New("the watch ended at once")

// Run keeps the objects until ctx ends.
func (i *Informer) Run(ctx context.Context) {
	next := retryBackoff.DelayWithReset(i.clock, relistReset)
	for ctx.Err() == nil {
		err := i.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			i.expired = true // list the latest, at once
			next = retryBackoff.DelayWithReset(i.clock, relistReset)
			continue
		}
		delay := next()
		i.log.Warn("watch failed; listing again", "err", err, "retryIn", delay.Round(time.Millisecond).String())
		if sleep(ctx, i.clock, delay) != nil {
			return
		}
	}
}

// listVersion is the version a list asks for, as client-go's reflector
// does: the first, "0" (any: the API server's watch cache answers, not
// etcd, when a thousand agents start at once); later ones, at least the
// last version seen; after that version expired, the latest ("").
func (i *Informer) listVersion() string {
	switch {
	case i.expired:
		return ""
	case i.version == "":
		return "0"
	}
	return i.version
}

// listAndWatch lists, then watches until the watch fails.
func (i *Informer) listAndWatch(ctx context.Context) error {
	items, version, err := i.lw.List(ctx, metav1.ListOptions{ResourceVersion: i.listVersion()})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	i.version, i.expired = version, false
	i.replace(items)
	for {
		timeout := int64((minWatchTimeout + rand.N(minWatchTimeout)) / time.Second)
		w, err := i.lw.Watch(ctx, metav1.ListOptions{ResourceVersion: i.version, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
		if err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		started := i.clock.Now()
		seen, err := i.follow(ctx, w)
		if err != nil {
			return err
		}
		if !seen && i.clock.Since(started) < shortWatch {
			return errWatchEnded
		}
	}
}

// follow keeps what w says until it ends, and the version of the last
// event; it returns whether it saw one, and an error when the watch failed.
func (i *Informer) follow(ctx context.Context, w watch.Interface) (bool, error) {
	defer w.Stop()
	seen := false
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return seen, ctx.Err()
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return seen, nil
		}
		seen = true
		if ev.Type == watch.Error {
			return seen, fmt.Errorf("watch: %w", apierrors.FromObject(ev.Object))
		}
		o, isObject := ev.Object.(Object)
		if !isObject {
			return seen, fmt.Errorf("watch: an event of %T", ev.Object)
		}
		i.version = o.GetResourceVersion()
		switch ev.Type {
		case watch.Added, watch.Modified:
			i.put(i.transform(o))
		case watch.Deleted:
			i.remove(i.transform(o))
		}
	}
}

// put keeps o and tells the handlers.
func (i *Informer) put(o Object) {
	k := Key(o)
	i.mu.Lock()
	old, had := i.objects[k]
	i.objects[k] = o
	i.mu.Unlock()
	for _, h := range i.handlers {
		if had && h.Update != nil {
			h.Update(old, o)
		} else if !had && h.Add != nil {
			h.Add(o)
		}
	}
}

// remove forgets o and tells the handlers.
func (i *Informer) remove(o Object) {
	k := Key(o)
	i.mu.Lock()
	_, had := i.objects[k]
	delete(i.objects, k)
	i.mu.Unlock()
	if !had {
		return
	}
	for _, h := range i.handlers {
		if h.Delete != nil {
			h.Delete(o)
		}
	}
}

// replace keeps items instead of what was kept, tells the handlers what
// changed (an object at another version, a new one, one gone), and marks
// the Informer synced.
func (i *Informer) replace(items []Object) {
	fresh := make(map[string]Object, len(items))
	for _, o := range items {
		o = i.transform(o)
		fresh[Key(o)] = o
	}
	i.mu.Lock()
	old := i.objects
	i.objects = fresh
	i.mu.Unlock()
	for k, o := range fresh {
		prev, had := old[k]
		for _, h := range i.handlers {
			switch {
			case !had && h.Add != nil:
				h.Add(o)
			case had && h.Update != nil && prev.GetResourceVersion() != o.GetResourceVersion():
				h.Update(prev, o)
			}
		}
	}
	for k, prev := range old {
		if _, ok := fresh[k]; ok {
			continue
		}
		for _, h := range i.handlers {
			if h.Delete != nil {
				h.Delete(prev)
			}
		}
	}
	if !i.HasSynced() { // only Run's goroutine closes it
		close(i.synced)
	}
}
