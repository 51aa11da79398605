package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Object is a Kubernetes object, as an Informer keeps it.
type Object interface {
	metav1.Object
	runtime.Object
}

// ListWatch lists and watches one set of objects of one type (the
// options' selectors are its own: it sets them).
type ListWatch struct {
	// Object is an object of the type listed.
	Object runtime.Object
	List   func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	Watch  func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// Recorder, when not nil, is told when the watch fails or turns
	// healthy.
	Recorder WatchRecorder
	// Unstreamed says the source cannot send a list as a watch's first
	// events (a test's source): the informer lists, then watches.
	Unstreamed bool
}

// Handlers are told of each change an Informer sees, in order, from one
// goroutine of the Informer's: they must not block.
type Handlers struct {
	Add    func(obj Object)
	Update func(old, cur Object)
	Delete func(obj Object)
}

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

// WatchRecorder is told when a watch turns healthy or fails (the metrics
// implement it).
type WatchRecorder interface {
	WatchHealth(watch string, healthy bool)
}

// InformerOptions are an Informer's settings; all are optional.
type InformerOptions struct {
	// Name names the watch in the log, the metrics and /healthz ("node",
	// "pods", ...).
	Name string
	// Transform is applied to every object before it is kept (it may
	// change it in place).
	Transform func(Object) Object
	Logger    *slog.Logger
	Clock     clock.PassiveClock
}

// Informer keeps the objects of a ListWatch in memory: client-go's shared
// informer (one list, then one watch from the list's version, watched
// again from the last version seen; listed again with client-go's backoff
// when a list or watch fails, and from the last version seen when it
// expired), and the health of its list and watch: since when they have
// failed with no success since.
type Informer struct {
	inf      cache.SharedIndexInformer
	name     string
	log      *slog.Logger
	recorder WatchRecorder
	clock    clock.PassiveClock

	mu            sync.Mutex
	registrations []cache.ResourceEventHandlerRegistration
	failingSince  time.Time // zero: healthy
	lastErr       error
}

// NewInformer returns an Informer of lw. Add handlers, then Run or Start.
func NewInformer(lw ListWatch, o InformerOptions) *Informer {
	i := &Informer{name: o.Name, log: o.Logger, recorder: lw.Recorder, clock: o.Clock}
	if i.log == nil {
		i.log = slog.New(slog.DiscardHandler)
	}
	if i.clock == nil {
		i.clock = clock.RealClock{}
	}
	clw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			out, err := lw.List(ctx, opts)
			i.observe(err, true)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.Watch(ctx, opts)
			i.observe(err, true)
			return w, err
		},
	}
	var source cache.ListerWatcher = clw
	if lw.Unstreamed {
		source = cache.ToListWatcherWithWatchListSemantics(clw, unstreamed{})
	}
	i.inf = cache.NewSharedIndexInformerWithOptions(source, lw.Object, cache.SharedIndexInformerOptions{ObjectDescription: o.Name})
	if o.Transform != nil {
		_ = i.inf.SetTransform(func(obj any) (any, error) {
			if ob, ok := obj.(Object); ok {
				return o.Transform(ob), nil
			}
			return obj, nil
		})
	}
	_ = i.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { i.observe(err, false) })
	return i
}

// unstreamed marks a source that cannot stream a list.
type unstreamed struct{}

func (unstreamed) IsWatchListSemanticsUnSupported() bool { return true }

// observe keeps the outcome of a list or watch: an error starts (or
// continues) a failure, a success ends it. An expired version is no
// failure: the informer lists again at once. A request's outcome is told
// to the recorder (request); the error a failed list or watch ends with is
// the same failure again, and only kept.
func (i *Informer) observe(err error, request bool) {
	if err != nil && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
		i.log.Debug("watch expired; listing again", "err", err)
		return
	}
	i.mu.Lock()
	wasHealthy := i.failingSince.IsZero()
	switch {
	case err == nil:
		i.failingSince, i.lastErr = time.Time{}, nil
	case wasHealthy:
		i.failingSince, i.lastErr = i.clock.Now(), err
	default:
		i.lastErr = err
	}
	i.mu.Unlock()
	if err != nil && request {
		i.log.Warn("list or watch failed; client-go tries again with backoff", "err", err)
	}
	if i.recorder != nil && (request && err != nil || wasHealthy != (err == nil)) {
		i.recorder.WatchHealth(i.name, err == nil)
	}
}

// Unhealthy is an error that says why when the list or watch has failed
// for longer than bound, nil otherwise.
func (i *Informer) Unhealthy(bound time.Duration) error {
	i.mu.Lock()
	since, err := i.failingSince, i.lastErr
	i.mu.Unlock()
	if since.IsZero() {
		return nil
	}
	if d := i.clock.Since(since); d > bound {
		return fmt.Errorf("the %s watch has failed for %s: %w", i.name, d.Round(time.Second), err)
	}
	return nil
}

// AddHandlers adds h; call it before Run.
func (i *Informer) AddHandlers(h Handlers) {
	object := func(o any) (Object, bool) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		ob, ok := o.(Object)
		return ob, ok
	}
	funcs := cache.ResourceEventHandlerFuncs{}
	if h.Add != nil {
		funcs.AddFunc = func(o any) {
			if ob, ok := object(o); ok {
				h.Add(ob)
			}
		}
	}
	if h.Update != nil {
		funcs.UpdateFunc = func(old, cur any) {
			o, ok1 := object(old)
			c, ok2 := object(cur)
			if ok1 && ok2 {
				h.Update(o, c)
			}
		}
	}
	if h.Delete != nil {
		funcs.DeleteFunc = func(o any) {
			if ob, ok := object(o); ok {
				h.Delete(ob)
			}
		}
	}
	reg, err := i.inf.AddEventHandler(funcs)
	if err != nil {
		panic(fmt.Sprintf("kube: handlers added to the stopped informer %q", i.name)) // a programming error
	}
	i.mu.Lock()
	i.registrations = append(i.registrations, reg)
	i.mu.Unlock()
}

// HasSynced reports whether the first list has been kept and every
// handler told of it.
func (i *Informer) HasSynced() bool {
	if !i.inf.HasSynced() {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range i.registrations {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

// List returns the objects as last seen, in no order.
func (i *Informer) List() []Object {
	items := i.inf.GetStore().List()
	out := make([]Object, 0, len(items))
	for _, o := range items {
		if ob, ok := o.(Object); ok {
			out = append(out, ob)
		}
	}
	return out
}

// Get returns the object of key (see Key), as last seen.
func (i *Informer) Get(key string) (Object, bool) {
	o, ok, _ := i.inf.GetStore().GetByKey(key)
	if !ok {
		return nil, false
	}
	ob, ok := o.(Object)
	return ob, ok
}

// Run keeps the objects until ctx ends.
func (i *Informer) Run(ctx context.Context) { i.inf.RunWithContext(ctx) }

// Start runs the Informer until ctx ends and returns once it has synced;
// ctx's error when ctx ended first.
func (i *Informer) Start(ctx context.Context) error {
	go i.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
		return ctx.Err()
	}
	return nil
}
