package lease_test

import (
	"context"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/internal/lease"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

// replica is one run for leadership: it records its terms, and fails the
// test if two replicas ever lead at once (leaders counts the replicas in a
// term).
type replica struct {
	t       *testing.T
	leaders *atomic.Int32
	started chan struct{} // closed when its first term starts
	ended   chan struct{} // closed when its first term ends
	once    sync.Once
	stop    func()
}

func (r *replica) lead(ctx context.Context) {
	if n := r.leaders.Add(1); n > 1 {
		r.t.Errorf("%d replicas lead at once", n)
	}
	first := false
	r.once.Do(func() { first = true; close(r.started) })
	<-ctx.Done()
	r.leaders.Add(-1)
	if first {
		close(r.ended)
	}
}

func newReplica(t *testing.T, leaders *atomic.Int32) *replica {
	return &replica{t: t, leaders: leaders, started: make(chan struct{}), ended: make(chan struct{})}
}

// start runs e for leadership (again after each term) until stopped.
func start(t *testing.T, leaders *atomic.Int32, e *lease.Election) *replica {
	t.Helper()
	r := newReplica(t, leaders)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			e.Run(ctx, r.lead)
		}
	}()
	r.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(r.stop)
	return r
}

func election(t *testing.T, ns, identity string, leaseDuration time.Duration) *lease.Election {
	t.Helper()
	c, err := lease.New(world.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &lease.Election{Client: c, Namespace: ns, Name: "leader", Identity: identity,
		LeaseDuration: leaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond, FieldManager: "test"}
}

func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never happened", what)
	}
}

// holders watches the Lease ns/leader and sends each holder it shows
// (empty: given up), in order.
func holders(t *testing.T, ns string) <-chan string {
	last := "\x00"
	return watchLease(t, ns, func(l *coordinationv1.Lease) (string, bool) {
		h := deref(l.Spec.HolderIdentity)
		changed := h != last
		last = h
		return h, changed
	})
}

// renewals watches the Lease ns/leader and sends each renewTime it shows.
func renewals(t *testing.T, ns string) <-chan string {
	return watchLease(t, ns, func(l *coordinationv1.Lease) (string, bool) {
		if l.Spec.RenewTime == nil {
			return "", false
		}
		return l.Spec.RenewTime.String(), true
	})
}

// watchLease sends what pick says of each version of the Lease ns/leader,
// when it says to.
func watchLease(t *testing.T, ns string, pick func(*coordinationv1.Lease) (string, bool)) <-chan string {
	t.Helper()
	w, err := world.Client.CoordinationV1().Leases(ns).Watch(testworld.Ctx(t, 5*time.Minute),
		metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "leader").String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	out := make(chan string, 100)
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted {
				if v, ok := pick(l); ok {
					out <- v
				}
			}
		}
	}()
	return out
}

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case h := <-ch:
		return h
	case <-time.After(2 * time.Minute):
		t.Fatal("the Lease did not change")
		return ""
	}
}

// TestOneLeaderThenAHandOver: of two replicas one leads; the other leads
// only after the first stops, which gives the Lease up (no holder) rather
// than leaving the other to wait out its duration (an hour here: only the
// hand-over can let the second lead within the test).
func TestOneLeaderThenAHandOver(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	seen := holders(t, ns)
	var leaders atomic.Int32
	a := start(t, &leaders, election(t, ns, "a", time.Hour))
	await(t, "a leads", a.started)
	if h := next(t, seen); h != "a" {
		t.Fatalf("the Lease names %q, want a", h)
	}
	b := start(t, &leaders, election(t, ns, "b", time.Hour))
	a.stop()
	await(t, "b leads", b.started)
	for _, want := range []string{"", "b"} {
		if h := next(t, seen); h != want {
			t.Fatalf("the Lease names %q, want %q (a gives it up, then b takes it)", h, want)
		}
	}
	l, err := world.Client.CoordinationV1().Leases(ns).Get(testworld.Ctx(t, 10*time.Second), "leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := deref(l.Spec.LeaseTransitions); got != 1 {
		t.Errorf("leaseTransitions %d, want 1 (a, then b)", got)
	}
}

// TestLeaderThatCannotRenewStopsLeading: when another holder takes the
// Lease (here the test, for an hour), the leader stops leading within its
// renew deadline, and does not take the Lease back or clear it.
func TestLeaderThatCannotRenewStopsLeading(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	var leaders atomic.Int32
	a := start(t, &leaders, election(t, ns, "a", time.Hour))
	await(t, "a leads", a.started)
	ctx := testworld.Ctx(t, time.Minute)
	leases := world.Client.CoordinationV1().Leases(ns)
	intruder, hour := "intruder", int32(3600)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // a renews meanwhile
		l, err := leases.Get(ctx, "leader", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &intruder, &hour, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	await(t, "a stops leading", a.ended)
	a.stop()
	l, err := leases.Get(ctx, "leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := deref(l.Spec.HolderIdentity); h != intruder {
		t.Errorf("the Lease names %q after a stopped, want the intruder's hold kept", h)
	}
}

// TestHolderRenewsWithOneRequest: the holder renews the Lease with one
// write, not a read and a write: half the requests an idle aggregator
// makes.
func TestHolderRenewsWithOneRequest(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	cfg := rest.CopyConfig(world.Config)
	var gets, puts atomic.Int32
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			switch r.Method {
			case http.MethodGet:
				gets.Add(1)
			case http.MethodPut:
				puts.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := lease.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := renewals(t, ns)
	var leaders atomic.Int32
	e := election(t, ns, "a", time.Hour)
	e.Client = c
	a := start(t, &leaders, e)
	await(t, "a leads", a.started)
	for range 5 {
		next(t, seen)
	}
	a.stop()
	if g, p := gets.Load(), puts.Load(); g > 2 || p < 4 {
		t.Errorf("%d reads and %d writes for the first renewals, want at most 2 reads (the first, and the release's)", g, p)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestElectsOneLeaderWithClientGo: during a rollout from a version that
// elected with client-go's leaderelection, the two versions elect one
// leader between them, and hand over.
func TestElectsOneLeaderWithClientGo(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	// client-go's elector does not wait for its leader to return before
	// it gives the Lease up: the Lease's holders say who led when.
	var oldLeaders, newLeaders atomic.Int32
	old := newReplica(t, &oldLeaders)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader"}, Client: world.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "old"}},
		LeaseDuration: time.Hour, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond, ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: old.lead, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); elector.Run(ctx) }()
	defer func() { cancel(); <-done }()
	await(t, "the old version leads", old.started)

	seen := holders(t, ns)
	if h := next(t, seen); h != "old" {
		t.Fatalf("the Lease names %q, want old", h)
	}
	b := start(t, &newLeaders, election(t, ns, "new", time.Hour))
	cancel()
	<-done
	await(t, "the new version leads", b.started)
	for _, want := range []string{"", "new"} {
		if h := next(t, seen); h != want {
			t.Fatalf("the Lease names %q, want %q", h, want)
		}
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
