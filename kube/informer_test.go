package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"
)

// scripted is a ListWatch whose lists answer from lists, in order, and
// whose watches are the FakeWatchers the test takes from watches; it
// records the options of each call.
type scripted struct {
	lists     chan []Object
	listRVs   chan string
	listOpts  chan metav1.ListOptions
	watches   chan *watch.FakeWatcher
	watchOpts chan metav1.ListOptions
}

func newScripted() *scripted {
	return &scripted{lists: make(chan []Object, 4), listRVs: make(chan string, 4), listOpts: make(chan metav1.ListOptions, 4),
		watches: make(chan *watch.FakeWatcher), watchOpts: make(chan metav1.ListOptions, 8)}
}

func (s *scripted) lw() ListWatch {
	return ListWatch{
		List: func(ctx context.Context, opts metav1.ListOptions) ([]Object, string, error) {
			s.listOpts <- opts
			select {
			case items := <-s.lists:
				return items, <-s.listRVs, nil
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			s.watchOpts <- opts
			w := watch.NewFake()
			select {
			case s.watches <- w:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
}

func (s *scripted) list(rv string, items ...Object) {
	s.lists <- items
	s.listRVs <- rv
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// told records what the handlers were told, one line per call.
func told(inf *Informer) chan string {
	c := make(chan string, 32)
	inf.AddHandlers(Handlers{
		Add: func(o Object) { c <- "add " + Key(o) + "@" + o.GetResourceVersion() },
		Update: func(old, cur Object) {
			c <- fmt.Sprintf("update %s@%s->%s", Key(cur), old.GetResourceVersion(), cur.GetResourceVersion())
		},
		Delete: func(o Object) { c <- "delete " + Key(o) },
	})
	return c
}

func expect(t *testing.T, c chan string, want ...string) {
	t.Helper()
	got := map[string]bool{}
	for range want {
		got[<-c] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("handlers were told %v, want %v", got, want)
			return
		}
	}
}

// TestInformerFollowsAndRelists: the list's objects are told as added;
// watch events as they come, the version of the last one kept; a watch
// the API server ends is watched again from that version (no list); an
// expired version lists again at once, and the list tells what changed
// while the watch was away: a new object, one gone, one at another version,
// and nothing of one unchanged.
func TestInformerFollowsAndRelists(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScripted()
	inf := NewInformer(s.lw(), nil, nil)
	c := told(inf)
	s.list("10", pod("a", "1"), pod("b", "2"), pod("c", "3"))
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, c, "add ns/a@1", "add ns/b@2", "add ns/c@3")
	if o := <-s.listOpts; o.ResourceVersion != "0" {
		t.Errorf("first list at version %q, want 0 (the watch cache's)", o.ResourceVersion)
	}

	w := <-s.watches
	if o := <-s.watchOpts; o.ResourceVersion != "10" || !o.AllowWatchBookmarks || o.TimeoutSeconds == nil {
		t.Errorf("first watch with %+v, want from the list's version 10, bookmarks and a timeout", o)
	}
	w.Modify(pod("a", "11"))
	expect(t, c, "update ns/a@1->11")
	w.Action(watch.Bookmark, pod("", "15"))
	w.Delete(pod("c", "16"))
	expect(t, c, "delete ns/c")
	w.Stop() // the API server ends the watch

	w = <-s.watches
	if o := <-s.watchOpts; o.ResourceVersion != "16" {
		t.Errorf("watched again from %q, want 16 (the last event's)", o.ResourceVersion)
	}
	if got, ok := inf.Get("ns/a"); !ok || got.GetResourceVersion() != "11" {
		t.Errorf("kept a at %v, want 11", got)
	}

	// The version expired: list again, without a pause.
	s.list("30", pod("a", "11"), pod("c", "20"), pod("d", "21"))
	w.Error(&apierrors.NewResourceExpired("too old resource version: 16 (25)").ErrStatus)
	expect(t, c, "delete ns/b", "add ns/c@20", "add ns/d@21")
	if o := <-s.listOpts; o.ResourceVersion != "" {
		t.Errorf("list after the version expired at %q, want the latest", o.ResourceVersion)
	}
	<-s.watches
	if o := <-s.watchOpts; o.ResourceVersion != "30" {
		t.Errorf("watched after the list from %q, want 30", o.ResourceVersion)
	}
	select {
	case extra := <-c:
		t.Errorf("the unchanged a was told: %s", extra)
	default:
	}
	if n := len(inf.List()); n != 3 {
		t.Errorf("keeps %d objects, want 3", n)
	}
}

// TestInformerTransforms: what is kept, and told, is the transform's.
func TestInformerTransforms(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScripted()
	inf := NewInformer(s.lw(), func(o Object) Object {
		o.SetAnnotations(nil)
		return o
	}, nil)
	c := told(inf)
	p := pod("a", "1")
	p.Annotations = map[string]string{"big": "x"}
	s.list("1", p)
	go inf.Run(ctx)
	expect(t, c, "add ns/a@1")
	if got, _ := inf.Get("ns/a"); got.GetAnnotations() != nil {
		t.Errorf("kept %v, want the transform's", got.GetAnnotations())
	}
}

// TestStatusErrors: an API server's answer becomes the error client-go
// gives, so that callers can ask apierrors what it was.
func TestStatusErrors(t *testing.T) {
	answer := func(code int, retryAfter string) *http.Response {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return &http.Response{StatusCode: code, Header: h}
	}
	r := request{method: http.MethodPost, res: pods, namespace: "ns", name: "p", subresource: "eviction"}
	status := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","code":429}`
	err := statusError(answer(429, ""), r, []byte(status))
	if !apierrors.IsTooManyRequests(err) || err.Error() != "Cannot evict pod as it would violate the pod's disruption budget." {
		t.Errorf("a refused eviction: %v", err)
	}
	if err := statusError(answer(404, ""), r, []byte("404 page not found")); !apierrors.IsNotFound(err) {
		t.Errorf("a plain 404: %v", err)
	}
	err = statusError(answer(503, "3"), r, nil)
	if d, ok := apierrors.SuggestsClientDelay(err); !apierrors.IsServiceUnavailable(err) || !ok || d != 3 {
		t.Errorf("a 503 with Retry-After 3: %v (delay %d %t)", err, d, ok)
	}
}

// delays is a log handler that sends each "watch failed" line's retryIn
// on a channel.
type delays chan time.Duration

func (d delays) Enabled(context.Context, slog.Level) bool { return true }
func (d delays) WithAttrs([]slog.Attr) slog.Handler       { return d }
func (d delays) WithGroup(string) slog.Handler            { return d }
func (d delays) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retryIn" {
			v, _ := time.ParseDuration(a.Value.String())
			d <- v
		}
		return true
	})
	return nil
}

// TestInformerBackoffStartsAgainWhenHealthy: failures in a row wait
// longer and longer before the informer lists again; once it has run
// healthy for two minutes, the next failure waits about a second again,
// not the longest wait of the last outage.
func TestInformerBackoffStartsAgainWhenHealthy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC))
	waits := make(delays, 16)
	lists, watches := make(chan error), make(chan *watch.FakeWatcher)
	lw := ListWatch{
		List: func(ctx context.Context, _ metav1.ListOptions) ([]Object, string, error) {
			select {
			case err := <-lists:
				return nil, "1", err
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		},
		Watch: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			select {
			case watches <- w:
				return w, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}
	inf := NewInformer(lw, nil, slog.New(waits))
	inf.clock = clk
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	unavailable := apierrors.NewServiceUnavailable("the API server is restarting")

	lists <- nil
	(<-watches).Error(&unavailable.ErrStatus)
	var last time.Duration
	for failure := 1; failure <= 6; failure++ {
		last = <-waits
		stepWhenWaiting(t, clk, last+time.Millisecond) // the log rounds to the millisecond
		if failure < 6 {
			lists <- unavailable
		}
	}
	if last < 15*time.Second {
		t.Fatalf("the sixth failure in a row waits %s, want 15 s or more", last)
	}
	lists <- nil
	w := <-watches
	clk.Step(3 * time.Minute) // healthy
	w.Error(&unavailable.ErrStatus)
	if d := <-waits; d >= time.Second {
		t.Errorf("a failure after three minutes healthy waits %s, want less than a second", d)
	}
}

// stepWhenWaiting steps clk by d once a goroutine waits on it: the
// informer logs its delay, then starts its timer.
func stepWhenWaiting(t *testing.T, clk *testingclock.FakeClock, d time.Duration) {
	t.Helper()
	for start := time.Now(); !clk.HasWaiters(); runtime.Gosched() {
		if time.Since(start) > time.Minute {
			t.Fatal("nothing waits on the clock")
		}
	}
	clk.Step(d)
}

// TestRetryDelays: the n-th retry in a row waits within [d/2, d] for d = 1 s
// doubled n-1 times, at most 30 s.
func TestRetryDelays(t *testing.T) {
	for range 20 {
		b := retryBackoff
		for n := 1; n <= 8; n++ {
			d := min(time.Second<<(n-1), 30*time.Second)
			if got := b.Step(); got < d/2 || got > d {
				t.Fatalf("retry %d waits %s, want %s to %s", n, got, d/2, d)
			}
		}
	}
}
