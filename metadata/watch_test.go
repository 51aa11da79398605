package metadata

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

type countingRecorder struct {
	mu     sync.Mutex
	counts map[[2]string]int
}

func (r *countingRecorder) MetadataRequest(key, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[[2]string]int{}
	}
	r.counts[[2]string{key, result}]++
}

func (r *countingRecorder) get(key, result string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[[2]string{key, result}]
}

type fixture struct {
	emu      *gceemu.Server
	watcher  *Watcher
	recorder *countingRecorder
	ctx      context.Context
}

// setup starts an emulator and a watcher with short timeouts: the long poll
// times out after timeout and the HTTP client gives up after httpTimeout.
func setup(t *testing.T, cfg gceemu.Config, timeout, httpTimeout time.Duration) *fixture {
	t.Helper()
	emu := gceemu.StartT(t, cfg)
	t.Setenv("GCE_METADATA_HOST", emu.Host())
	rec := &countingRecorder{}
	client := gcemetadata.NewWithOptions(&gcemetadata.Options{Client: &http.Client{
		Timeout:   httpTimeout,
		Transport: &onceTransport{next: http.DefaultTransport},
	}})
	w := NewWatcher(WatcherOptions{Client: client, Timeout: timeout, Backoff: backoff.Policy{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}, Recorder: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &fixture{emu: emu, watcher: w, recorder: rec, ctx: ctx}
}

// watch runs Watch on key in the background and returns the answers the
// handler received. parse decides whether an answer is understood.
func (f *fixture) watch(t *testing.T, key string, parse func(Answer) bool) <-chan Answer {
	ch := make(chan Answer, 32)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.watcher.Watch(ctx, key, func(_ context.Context, a Answer) bool {
			if !parse(a) {
				return false
			}
			ch <- a
			return true
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	return ch
}

func next(t *testing.T, f *fixture, ch <-chan Answer) Answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-f.ctx.Done():
		t.Fatal("no answer")
		return Answer{}
	}
}

func eventParser(a Answer) bool {
	_, err := maintenance.ParseEvent(a.Value)
	return a.Absent || err == nil
}

func waitUntil(t *testing.T, f *fixture, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-f.ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestWatchDeliversChangesOnce(t *testing.T) {
	f := setup(t, gceemu.Config{}, time.Second, 5*time.Second)
	ch := f.watch(t, KeyMaintenanceEvent, eventParser)
	if a := next(t, f, ch); a.Value != "NONE" {
		t.Fatalf("first answer %+v, want NONE", a)
	}
	// Let the one-second long polls time out a few times: the unchanged
	// value comes back each time but is not passed on.
	waitUntil(t, f, "two timed-out polls", func() bool { return f.recorder.get(KeyMaintenanceEvent, ResultOK) >= 3 })
	select {
	case a := <-ch:
		t.Fatalf("unchanged value re-delivered: %+v", a)
	default:
	}
	// An ETag reset re-delivers the unchanged value under a new ETag: still
	// not passed on.
	f.emu.ResetETags()
	f.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	if a := next(t, f, ch); a.Value != gceemu.EventTerminate {
		t.Fatalf("after the change: %+v, want %s", a, gceemu.EventTerminate)
	}
	if f.watcher.LastGood(KeyMaintenanceEvent).IsZero() {
		t.Error("LastGood not set after good answers")
	}
}

func TestWatchUpcomingAbsence(t *testing.T) {
	for _, absence := range []gceemu.Absence{gceemu.AbsentUnavailable, gceemu.AbsentNotFound, gceemu.AbsentEmptyObject, gceemu.AbsentNone} {
		f := setup(t, gceemu.Config{Absence: absence}, time.Second, 5*time.Second)
		ch := f.watch(t, KeyUpcomingMaintenance, func(a Answer) bool {
			_, _, err := maintenance.ParseNotice(a.Value)
			return a.Absent || err == nil
		})
		a := next(t, f, ch)
		_, present, err := maintenance.ParseNotice(a.Value)
		if err != nil || present {
			t.Errorf("absence %d: first answer %+v, want nothing scheduled", absence, a)
		}
		f.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), time.Hour))
		a = next(t, f, ch)
		n, present, err := maintenance.ParseNotice(a.Value)
		if err != nil || !present || n.Status != maintenance.StatusPending || !n.WindowStart.Equal(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)) {
			t.Errorf("absence %d: after scheduling: %+v %v %v, want the pending notice", absence, n, present, err)
		}
		if got := f.recorder.get(KeyUpcomingMaintenance, ResultServerError); got != 0 {
			t.Errorf("absence %d: %d server errors counted, want 0 (absence is an answer)", absence, got)
		}
	}
}

func TestWatchSurvivesFaults(t *testing.T) {
	f := setup(t, gceemu.Config{}, time.Second, 300*time.Millisecond)
	key := gceemu.MetadataPrefix + KeyMaintenanceEvent
	// The server fails every request until told otherwise.
	f.emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultStatus, Status: 503})
	start := time.Now()
	ch := f.watch(t, KeyMaintenanceEvent, eventParser)
	waitUntil(t, f, "three failed requests", func() bool { return f.recorder.get(KeyMaintenanceEvent, ResultServerError) >= 3 })
	if !f.watcher.LastGood(KeyMaintenanceEvent).IsZero() {
		t.Error("LastGood set while every request failed")
	}
	if err := f.watcher.Healthy([]string{KeyMaintenanceEvent}, start, 0); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("Healthy with no good answer = %v, want ErrUnhealthy", err)
	}
	f.emu.ClearFaults()
	if a := next(t, f, ch); a.Value != "NONE" {
		t.Fatalf("after the 503s: %+v, want NONE", a)
	}
	if err := f.watcher.Healthy([]string{KeyMaintenanceEvent}, start, time.Hour); err != nil {
		t.Errorf("Healthy after a good answer = %v", err)
	}

	// Dropped connections, a hung request and a garbage body: counted,
	// survived, and the next real change still arrives.
	f.emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultDrop, Times: 2})
	f.emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultHang, Times: 1})
	f.emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultGarbage, Times: 1})
	waitUntil(t, f, "the faults to be used up", func() bool {
		return f.recorder.get(KeyMaintenanceEvent, ResultUnparseable) >= 1
	})
	// The official client retries dropped connections itself; the hung
	// request ends at the HTTP client's timeout and is counted.
	if f.recorder.get(KeyMaintenanceEvent, ResultTransport) < 1 {
		t.Errorf("transport errors counted: %d, want at least 1", f.recorder.get(KeyMaintenanceEvent, ResultTransport))
	}
	f.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	// The next value passed on is the real change: neither the garbage nor
	// the unchanged NONE after it.
	if a := next(t, f, ch); a.Value != gceemu.EventTerminate {
		t.Fatalf("after the faults: %+v, want %s", a, gceemu.EventTerminate)
	}
}

func TestWatchUnknownValueIsNotPassedOn(t *testing.T) {
	f := setup(t, gceemu.Config{}, time.Second, 5*time.Second)
	f.emu.SetMaintenanceEvent("REBOOT_SOMETIME_MAYBE")
	ch := f.watch(t, KeyMaintenanceEvent, eventParser)
	waitUntil(t, f, "the unknown value to be counted", func() bool { return f.recorder.get(KeyMaintenanceEvent, ResultUnparseable) >= 1 })
	if !f.watcher.LastGood(KeyMaintenanceEvent).IsZero() {
		t.Error("an unknown value counted as a good answer")
	}
	f.emu.SetMaintenanceEvent(gceemu.EventNone)
	if a := next(t, f, ch); a.Value != "NONE" {
		t.Fatalf("got %+v, want NONE", a)
	}
}

// pacedFixture is a watcher and an emulator on one fake clock, so that a
// test counts the requests made in each poll timeout exactly.
type pacedFixture struct {
	emu   *gceemu.Server
	clock *testingclock.FakeClock
	w     *Watcher
	ctx   context.Context
}

const pacedTimeout = 60 * time.Second

func setupPaced(t *testing.T, cfg gceemu.Config) *pacedFixture {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	emu := gceemu.StartT(t, cfg)
	w := NewWatcher(WatcherOptions{Client: NewClient(pacedTimeout, emu.Host()), Timeout: pacedTimeout, Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &pacedFixture{emu: emu, clock: clk, w: w, ctx: ctx}
}

// settled waits until the key's loop is parked on the fake clock (in the
// watcher's pause or in the server's hang) after exactly n requests.
func (f *pacedFixture) settled(t *testing.T, n int) {
	t.Helper()
	for f.emu.Requests() < n || !f.clock.HasWaiters() {
		select {
		case <-f.ctx.Done():
			t.Fatalf("never parked after %d requests (made %d)", n, f.emu.Requests())
		case <-time.After(time.Millisecond):
		}
	}
	if got := f.emu.Requests(); got != n {
		t.Fatalf("%d requests, want %d", got, n)
	}
}

// TestWatchPacesEveryFormOfNoNotice: whatever form "no notice" takes, an
// unchanged answer costs one request per poll timeout; a change is seen at
// once where the server long-polls, and within one timeout where it does
// not.
func TestWatchPacesEveryFormOfNoNotice(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      gceemu.Config
		longPoll bool
	}{
		{"empty object", gceemu.Config{Absence: gceemu.AbsentEmptyObject}, true},
		{"NONE", gceemu.Config{Absence: gceemu.AbsentNone}, true},
		{"404", gceemu.Config{Absence: gceemu.AbsentNotFound}, false},
		{"503 no notifications", gceemu.Config{Absence: gceemu.AbsentUnavailable}, false},
		{"no ETag", gceemu.Config{NoETag: true}, false},
		{"wait_for_change ignored", gceemu.Config{NoLongPoll: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setupPaced(t, tc.cfg)
			answers := make(chan Answer, 8)
			ctx, cancel := context.WithCancel(f.ctx)
			done := make(chan error, 1)
			go func() {
				done <- f.w.Watch(ctx, KeyUpcomingMaintenance, func(_ context.Context, a Answer) bool { answers <- a; return true })
			}()
			defer func() { cancel(); <-done }()
			// The first answer, then a second request (a long poll, or an
			// immediate answer followed by a pause).
			f.settled(t, 2)
			if a := <-answers; !a.Absent && !strings.Contains(a.Value, "{") && a.Value != `"NONE"` {
				t.Fatalf("first answer %+v", a)
			}
			for i := range 5 {
				f.clock.Step(pacedTimeout)
				f.settled(t, 3+i)
			}
			select {
			case a := <-answers:
				t.Fatalf("unchanged answer passed on: %+v", a)
			default:
			}
			f.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), time.Hour))
			if !tc.longPoll {
				f.clock.Step(pacedTimeout)
			}
			select {
			case a := <-answers:
				if _, present, err := maintenance.ParseNotice(a.Value); err != nil || !present {
					t.Fatalf("after scheduling: %+v %v", a, err)
				}
			case <-f.ctx.Done():
				t.Fatal("the notice was never passed on")
			}
		})
	}
}

// TestWatchMakesOneRequestPerAttempt: the official client would retry a 503
// five times and a hung request after its timeout; the watcher makes one
// request per attempt, so a hang costs one timeout and the watcher's own
// backoff decides the rest.
func TestWatchMakesOneRequestPerAttempt(t *testing.T) {
	emu := gceemu.StartT(t, gceemu.Config{})
	rec := &countingRecorder{}
	// One second of poll timeout: a hung request gives up after 1.2 s.
	w := NewWatcher(WatcherOptions{Client: NewClient(time.Second, emu.Host()), Timeout: time.Second, HangAfter: 200 * time.Millisecond,
		Backoff: backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}, Recorder: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := gceemu.MetadataPrefix + KeyMaintenanceEvent
	emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultStatus, Status: 503, Times: 3})
	emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultHang, Times: 1})
	got := make(chan Answer, 1)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(wctx, KeyMaintenanceEvent, func(_ context.Context, a Answer) bool {
			select {
			case got <- a:
			default:
			}
			return true
		})
	}()
	defer func() { stop(); <-done }()
	select {
	case a := <-got:
		if a.Value != "NONE" {
			t.Fatalf("answer %+v", a)
		}
	case <-ctx.Done():
		t.Fatal("no answer after the faults")
	}
	if served, failed := emu.FaultsServed(), rec.get(KeyMaintenanceEvent, ResultServerError)+rec.get(KeyMaintenanceEvent, ResultTransport); served != 4 || failed != 4 {
		t.Errorf("%d requests answered by a fault, %d failures counted; want 4 and 4 (one request per attempt)", served, failed)
	}
}

// healthLog records what a HealthListener hears, and how many requests
// for the key had ended by then.
type healthLog struct {
	rec       *countingRecorder
	unhealthy chan int // requests ended when KeyUnhealthy came
	recovered chan struct{}
}

func (h *healthLog) KeyUnhealthy(key string, _ error, _ time.Duration) {
	ended := 0
	for _, r := range []string{ResultOK, ResultServerError, ResultTransport, ResultUnparseable, ResultNoNotice, ResultNotDefined} {
		ended += h.rec.get(key, r)
	}
	h.unhealthy <- ended
}
func (h *healthLog) KeyRecovered(string) { h.recovered <- struct{}{} }

// TestWatchTellsAHangWhenItsLimitPasses: a request that hangs is told
// unhealthy when the key's limit passes, as /healthz says it, not when
// the request gives up (a whole poll timeout and more later).
func TestWatchTellsAHangWhenItsLimitPasses(t *testing.T) {
	f := setup(t, gceemu.Config{}, time.Second, 10*time.Minute)
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC))
	health := &healthLog{rec: f.recorder, unhealthy: make(chan int, 4), recovered: make(chan struct{}, 4)}
	f.watcher.health, f.watcher.unhealthyAfter, f.watcher.clock = health, time.Minute, clk
	f.emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + KeyMaintenanceEvent, Kind: gceemu.FaultHang, Times: 1})
	f.watch(t, KeyMaintenanceEvent, eventParser)
	waitUntil(t, f, "the first request to hang", func() bool { return f.emu.FaultsServed() == 1 })
	waitUntil(t, f, "the health timer", clk.HasWaiters)
	clk.Step(time.Minute + time.Second)
	select {
	case ended := <-health.unhealthy:
		if ended != 0 {
			t.Errorf("told unhealthy after %d requests ended, want while the first still hangs", ended)
		}
	case <-f.ctx.Done():
		t.Fatal("never told the key is unhealthy while its request hangs")
	}
	f.emu.ClearFaults()
}

// Since tells how long a value may have been there: unknown for the first
// answer, the latest answer of the value before it otherwise, however long
// the server failed in between (an agent that was backing off when a signal
// appeared must not take it for new).
func TestWatchTellsSinceWhenAValueMayHaveHeld(t *testing.T) {
	f := setup(t, gceemu.Config{}, time.Second, 300*time.Millisecond)
	key := gceemu.MetadataPrefix + KeyMaintenanceEvent
	start := time.Now()
	ch := f.watch(t, KeyMaintenanceEvent, eventParser)
	if a := next(t, f, ch); a.Value != "NONE" || !a.Since.IsZero() {
		t.Fatalf("first answer %+v, want NONE with no Since (nothing was seen before it)", a)
	}

	f.emu.InjectFault(gceemu.Fault{Path: key, Kind: gceemu.FaultStatus, Status: 503})
	waitUntil(t, f, "two failed requests", func() bool { return f.recorder.get(KeyMaintenanceEvent, ResultServerError) >= 2 })
	failed := time.Now()
	f.emu.SetMaintenanceEvent(gceemu.EventTerminate)
	f.emu.ClearFaults()
	a := next(t, f, ch)
	if a.Value != gceemu.EventTerminate || a.Since.Before(start) || a.Since.After(failed) {
		t.Fatalf("after the failures: %+v, want %s with Since between the watch's start %s and the failures %s (the last NONE, before the gap)",
			a, gceemu.EventTerminate, start.Format(time.StampMilli), failed.Format(time.StampMilli))
	}

	set := time.Now()
	f.emu.SetMaintenanceEvent(gceemu.EventNone)
	b := next(t, f, ch)
	if b.Value != gceemu.EventNone || b.Since.Before(a.Since) || b.Since.Before(failed) || b.Since.After(set) {
		t.Errorf("after the next change: %+v, want NONE with Since between the TERMINATE answer (after %s) and the change %s",
			b, failed.Format(time.StampMilli), set.Format(time.StampMilli))
	}
}

// A long poll on the old value that the server held until the value
// changed tells the change came about when its answer did, however long the
// poll was held: a preemption seen that way has its 30 s.
func TestWatchTellsAChangeALongPollWaitedFor(t *testing.T) {
	emu := gceemu.StartT(t, gceemu.Config{})
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	w := NewWatcher(WatcherOptions{Client: NewClient(time.Minute, emu.Host()), Timeout: time.Minute, Clock: clk})
	f := &fixture{emu: emu, watcher: w, recorder: &countingRecorder{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	f.ctx = ctx
	ch := f.watch(t, KeyPreempted, func(a Answer) bool { _, err := maintenance.ParsePreempted(a.Value); return err == nil })
	if a := next(t, f, ch); a.Value != "FALSE" {
		t.Fatalf("first answer %+v, want FALSE", a)
	}
	first := clk.Now()
	waitUntil(t, f, "the long poll held by the server", func() bool { return emu.Waiting() >= 1 })
	clk.Step(20 * time.Second) // the poll is held 20 s
	emu.SetPreempted(true)
	a := next(t, f, ch)
	if want := first.Add(20*time.Second - answerDelay); a.Value != "TRUE" || !a.Since.Equal(want) {
		t.Errorf("after a held poll: %+v, want TRUE with Since %s (a moment before the answer), not the poll's start %s", a, want, first)
	}
}
