package aggregator

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"log/slog"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestEachDecisionIsToldOnceUntilItChanges: a pass tells a node's decision
// when it changed, and not again while it holds, whatever else of the node
// or its pool changed; a decision that goes (its notice gone) and comes
// back is told again, as is a node's decision in the pool it moved to; a
// pool gone is forgotten. A plan that follows one never told is told
// against what was told, not against the plan before: a decision gone in
// the plan not told is forgotten, and told again when it comes back. What
// is told is counted in the decisions metric as its Event is sent.
func TestEachDecisionIsToldOnceUntilItChanges(t *testing.T) {
	a := &Aggregator{opts: Options{}.withDefaults(), log: slog.New(slog.DiscardHandler), unannounced: map[string]bool{}}
	a.recorder = kube.NewRecorder(discardSink{}, corev1.EventSource{Component: protocol.EventSourceAggregator}, nil)
	defer a.recorder.Shutdown()
	a.beginLead()
	a.lastReason, a.lastPoolErr = map[string]*poolTold{}, map[string]string{}
	told := func() float64 {
		return testutil.ToFloat64(a.opts.Metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonNotIdle)))
	}
	var f fleet.Fleet
	busy := func(name, pool string) fleet.Node {
		return fleet.Node{Name: name, Pool: pool, Ready: true, Busy: protocol.BusyAccelerators, NoticePresent: true,
			Config: "node-idle-time=600s,min-nodes=0,window=2419200s",
			Notice: maintenance.Notice{Status: maintenance.StatusPending, CanReschedule: true, WindowStart: now.Add(72 * time.Hour)}}
	}
	// pass decides and tells, or, cut, stops before it tells (as a pass
	// whose claims cannot be written does).
	pass := func(cut bool) {
		t.Helper()
		plans := f.Decide(now, policy.Config{})
		fresh, replaced := f.Changes()
		a.markUnannounced(fresh, replaced)
		if cut {
			return
		}
		if left, _ := a.announcePlans(plans); left > 0 {
			t.Fatalf("%d pools left untold at a pace of %d", left, announceBurst)
		}
	}
	for _, step := range []struct {
		what   string
		change func()
		cut    bool
		told   float64
	}{
		{"two busy nodes with a notice", func() { f.Set(busy("n1", "a")); f.Set(busy("n2", "a")) }, false, 2},
		{"n1 changed, still busy", func() { n := busy("n1", "a"); n.Busy = protocol.BusySafeToEvict; f.Set(n); f.Set(busy("n1", "a")) }, false, 2},
		{"a third node", func() { f.Set(busy("n3", "a")) }, false, 3},
		{"n1's notice gone", func() { n := busy("n1", "a"); n.NoticePresent = false; f.Set(n) }, false, 3},
		{"n1's notice back", func() { f.Set(busy("n1", "a")) }, false, 4},
		{"n2 moved to pool b", func() { f.Set(busy("n2", "b")) }, false, 5},
		{"nothing changed", func() {}, false, 5},
		{"n1 runs a pod that must not be evicted", func() { n := busy("n1", "a"); n.Busy = protocol.BusySafeToEvict; f.Set(n) }, false, 5},
		{"n1 busy again", func() { f.Set(busy("n1", "a")) }, false, 6},
		{"n3's notice gone, and the pass cut before it tells", func() { n := busy("n3", "a"); n.NoticePresent = false; f.Set(n) }, true, 6},
		{"n1 runs a pod that must not be evicted, again", func() { n := busy("n1", "a"); n.Busy = protocol.BusySafeToEvict; f.Set(n) }, false, 6},
		{"n1 busy again, and n3's notice back", func() { f.Set(busy("n1", "a")); f.Set(busy("n3", "a")) }, false, 8},
	} {
		step.change()
		pass(step.cut)
		if got := told(); got != step.told {
			t.Errorf("%s: %v decisions told in all, want %v", step.what, got, step.told)
		}
	}
	f.Delete("n2")
	pass(false)
	if _, ok := a.lastReason["b"]; ok {
		t.Errorf("pool b is gone, and what was told of it is still remembered")
	}
	if got, want := len(a.lastReason["a"].nodes), 2; got != want {
		t.Errorf("%d nodes of pool a remembered, want %d (n1 and n3)", got, want)
	}
}

// discardSink takes the Events and keeps none.
type discardSink struct{}

func (discardSink) Create(e *corev1.Event) (*corev1.Event, error)          { return e, nil }
func (discardSink) Update(e *corev1.Event) (*corev1.Event, error)          { return e, nil }
func (discardSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return e, nil }

// TestDecisionsToldAtTheirPace: a new leader's first pass decides every
// node; its decisions are told as Events no faster than the Events client
// writes them (so that client-go's recorder, which drops what overflows
// its queue, drops none): what is beyond the pace is told in later
// passes, none twice, and the pass says when the next may tell more.
func TestDecisionsToldAtTheirPace(t *testing.T) {
	announceRate, announceBurst = 1, 5
	t.Cleanup(func() { announceRate, announceBurst = 40, 800 })
	clk := testingclock.NewFakeClock(now)
	a := &Aggregator{opts: Options{Clock: clk}.withDefaults(), log: slog.New(slog.DiscardHandler), unannounced: map[string]bool{}}
	a.recorder = kube.NewRecorder(discardSink{}, corev1.EventSource{Component: protocol.EventSourceAggregator}, nil)
	defer a.recorder.Shutdown()
	a.beginLead()
	told := func() float64 {
		return testutil.ToFloat64(a.opts.Metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonNotIdle)))
	}
	var f fleet.Fleet
	for i := range 12 { // 4 pools of 3 busy nodes
		f.Set(fleet.Node{Name: fmt.Sprintf("n%d", i), Pool: fmt.Sprintf("p%d", i/3), Ready: true, Busy: protocol.BusyAccelerators, NoticePresent: true,
			Config: "node-idle-time=600s,min-nodes=0,window=2419200s",
			Notice: maintenance.Notice{Status: maintenance.StatusPending, CanReschedule: true, WindowStart: now.Add(72 * time.Hour)}})
	}
	var told3 []float64
	for pass := range 6 {
		plans := f.Decide(clk.Now(), policy.Config{})
		fresh, replaced := f.Changes()
		a.markUnannounced(fresh, replaced)
		left, wait := a.announcePlans(plans)
		told3 = append(told3, told())
		if left > 0 && wait <= 0 {
			t.Fatalf("pass %d left %d pools with no wait", pass, left)
		}
		if left == 0 {
			break
		}
		clk.Step(wait)
	}
	// 5 tokens: one pool of 3 and two of the next; then 1 a second, a
	// pass when a pool's worth (3) has come.
	if want := []float64{5, 8, 11, 12}; !slices.Equal(told3, want) {
		t.Errorf("decisions told after each pass: %v, want %v", told3, want)
	}
}

// countingSink counts the Events written, by reason.
type countingSink struct {
	mu       sync.Mutex
	byReason map[string]int
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byReason[e.Reason]++
	return e, nil
}
func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error)          { return e, nil }
func (s *countingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return e, nil }

// TestAPoolBeyondTheBurstIsToldInParts: a pool with more to tell than the
// pace's burst (a new leader's first pass over a pool of thousands, or an
// invalid configuration on each of its nodes) is told in parts, never more
// than the pace allows at once, until every node has been told its
// decision and the pool's error exactly once.
func TestAPoolBeyondTheBurstIsToldInParts(t *testing.T) {
	announceRate, announceBurst = 1, 5
	t.Cleanup(func() { announceRate, announceBurst = 40, 800 })
	clk := testingclock.NewFakeClock(now)
	a := &Aggregator{opts: Options{Clock: clk}.withDefaults(), log: slog.New(slog.DiscardHandler), unannounced: map[string]bool{}}
	sink := &countingSink{byReason: map[string]int{}}
	a.recorder = kube.NewRecorder(sink, corev1.EventSource{Component: protocol.EventSourceAggregator}, nil)
	a.beginLead()
	var f fleet.Fleet
	for i := range 12 { // one pool of 12 nodes, one of which disagrees on the settings
		config := "node-idle-time=600s,min-nodes=0,window=2419200s"
		if i == 0 {
			config = "node-idle-time=60s,min-nodes=0,window=2419200s"
		}
		f.Set(fleet.Node{Name: fmt.Sprintf("n%d", i), Pool: "big", Ready: true, Busy: protocol.BusyAccelerators, NoticePresent: true, Config: config,
			Notice: maintenance.Notice{Status: maintenance.StatusPending, CanReschedule: true, WindowStart: now.Add(72 * time.Hour)}})
	}
	passes := 0
	for ; passes < 30; passes++ {
		plans := f.Decide(clk.Now(), policy.Config{})
		fresh, replaced := f.Changes()
		a.markUnannounced(fresh, replaced)
		before := float64(announceBurst)
		if a.pace != nil {
			before = a.pace.TokensAt(clk.Now())
		}
		toldBefore := testutil.ToFloat64(a.opts.Metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonInvalidConfig)))
		left, wait := a.announcePlans(plans)
		if told := testutil.ToFloat64(a.opts.Metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonInvalidConfig))) - toldBefore; told > before {
			t.Errorf("pass %d told %v decisions with %v of the pace left", passes, told, before)
		}
		if left == 0 {
			break
		}
		if wait <= 0 {
			t.Fatalf("pass %d left the pool with no wait", passes)
		}
		clk.Step(wait)
	}
	a.recorder.Shutdown()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if got, want := sink.byReason, map[string]int{protocol.EventSkipped: 12, protocol.EventInvalidConfig: 12}; !maps.Equal(got, want) {
		t.Errorf("Events written %v, want %v: each node told its decision and the pool's error once", got, want)
	}
	if passes < 4 {
		t.Errorf("told in %d passes; 24 Events at a burst of 5 take at least 5", passes+1)
	}
}
