package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// posted is a receiver that keeps each body and signals a post (one
// signal waits at most).
type posted struct {
	mu     sync.Mutex
	bodies [][]byte
	got    chan struct{}
}

func (p *posted) ServeHTTP(_ http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	p.mu.Unlock()
	select {
	case p.got <- struct{}{}:
	default:
	}
}

// TestNotifierDigestsAPreemption: 1,000 nodes of ten reservation
// sub-blocks are preempted, each draining, then in maintenance, then
// back. With a 30 s digest the receiver gets three messages, one per
// window: each counts every step held (the nodes' and their groups'),
// lists its groups first, and names the count of those left out; the
// notifier counts every step sent.
func TestNotifierDigestsAPreemption(t *testing.T) {
	const nodes = 1000
	recv := &posted{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	clk := timerClock{testingclock.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)), make(chan time.Duration, 1)}
	a, nt := testNotifier(t, clk, srv.URL)
	nt.opts.Digest = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	done := make(chan struct{})
	go func() { nt.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	t0 := clk.Now()
	node := func(i int, st protocol.AgentState) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%04d", i), Labels: map[string]string{
			a.opts.PoolLabel: "a3", protocol.LabelTopologyBlock: "b1", protocol.LabelTopologySubblock: fmt.Sprintf("s%d", i%10)}}}
		protocol.WriteAgentState(n, st)
		return n
	}
	idle := protocol.AgentState{Phase: protocol.PhaseIdle}
	draining := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(30 * time.Second)}
	terminating := draining
	terminating.Phase = protocol.PhaseTerminating
	phases := []struct {
		from, to protocol.AgentState
		want     Digest
	}{
		{idle, draining, Digest{Count: nodes + 10, Steps: map[string]int{string(fleet.StepDraining): nodes + 10},
			Reasons: map[string]int{string(protocol.ReasonPreemption): nodes + 10}, Pools: map[string]int{"a3": nodes + 10}, Omitted: nodes + 10 - digestListed}},
		{draining, terminating, Digest{Count: nodes, Steps: map[string]int{string(fleet.StepInMaintenance): nodes},
			Reasons: map[string]int{string(protocol.ReasonPreemption): nodes}, Pools: map[string]int{"a3": nodes}, Omitted: nodes - digestListed}},
		{terminating, idle, Digest{Count: nodes + 10, Steps: map[string]int{string(fleet.StepBack): nodes + 10},
			Reasons: map[string]int{string(protocol.ReasonPreemption): nodes}, Pools: map[string]int{"a3": nodes + 10}, Omitted: nodes + 10 - digestListed}},
	}
	for i, ph := range phases {
		for n := range nodes {
			a.notifyNode(node(n, ph.from), node(n, ph.to))
		}
		select {
		case d := <-clk.timers:
			if d != 30*time.Second {
				t.Fatalf("window of %s; want 30s", d)
			}
		case <-recv.got:
			t.Fatalf("window %d: posted before it closed", i)
		case <-ctx.Done():
			t.Fatal("no window opened")
		}
		clk.Step(30 * time.Second)
		select {
		case <-recv.got:
		case <-ctx.Done():
			t.Fatalf("window %d closed: nothing posted", i)
		}
		recv.mu.Lock()
		posts, last := len(recv.bodies), recv.bodies[len(recv.bodies)-1]
		recv.mu.Unlock()
		if posts != i+1 {
			t.Fatalf("after window %d: %d posts; want %d", i, posts, i+1)
		}
		var got digestBody
		if err := json.Unmarshal(last, &got); err != nil {
			t.Fatalf("window %d: %v\n%s", i, err, last)
		}
		listed := got.Notifications
		got.Notifications = nil
		if diff := cmp.Diff(ph.want, *got.Digest); diff != "" {
			t.Errorf("window %d's digest (-want +got):\n%s", i, diff)
		}
		groups := ph.want.Count - nodes
		if len(listed) != digestListed || (groups > 0 && (listed[0].Group == "" || listed[0].Node != "")) {
			t.Errorf("window %d lists %d, first %+v; want %d, its groups first", i, len(listed), listed[0], digestListed)
		}
	}
	// The sender opens the next window once it has posted and counted
	// the last: one more step, and its window, say it has.
	nt.mu.Lock()
	nt.enqueue(fleet.Notification{Node: "gpu-late", Step: fleet.StepScheduled}, "")
	nt.mu.Unlock()
	select {
	case <-clk.timers:
	case <-ctx.Done():
		t.Fatal("no window opened after the last")
	}
	var sent float64
	for _, s := range fleet.Steps {
		sent += testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(s), "sent"))
	}
	if sent != 3*nodes+20 {
		t.Errorf("counted %v steps sent; want %d", sent, 3*nodes+20)
	}
}

// TestNotifierDigestOfOneIsTheStep: a window that held one step posts
// it as it is posted without a digest.
func TestNotifierDigestOfOneIsTheStep(t *testing.T) {
	_, nt := testNotifier(t, testingclock.NewFakeClock(time.Now()), "http://127.0.0.1:1")
	x := fleet.Notification{Node: "gpu-0", Pool: "a3", Step: fleet.StepDraining, Reason: "preemption", When: time.Unix(1_800_000_000, 0).UTC(), Message: "gpu-0 drains"}
	for _, format := range NotifyFormats[:3] {
		nt.opts.Format = format
		want, _, err := nt.body(x)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := nt.batchBody(batchOf(x))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s (-alone +held):\n%s", format, diff)
		}
	}
}

// TestNotifierFiltersSteps: with --notify-steps draining,back, only a
// node's and a group's draining and back are told; the other steps are
// neither queued nor counted.
func TestNotifierFiltersSteps(t *testing.T) {
	a, nt := testNotifier(t, testingclock.NewFakeClock(time.Now()), "http://127.0.0.1:1")
	nt.opts.Steps = []fleet.Step{fleet.StepDraining, fleet.StepBack}
	for _, s := range fleet.Steps {
		nt.enqueue(fleet.Notification{Node: "gpu-0", Step: s}, "")
		nt.enqueue(fleet.Notification{Group: "b1/s1", Step: s}, "h0")
	}
	var got []string
	for len(nt.queue) > 0 {
		x := <-nt.queue
		got = append(got, x.Node+x.Group+" "+string(x.Step))
	}
	want := []string{"gpu-0 draining", "b1/s1 draining", "gpu-0 back", "b1/s1 back"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
	for _, s := range fleet.Steps {
		for _, outcome := range []string{"dropped", "rate_limited"} {
			if n := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(s), outcome)); n != 0 {
				t.Errorf("%s %s counted %v; want none", s, outcome, n)
			}
		}
	}
}

// TestNotifierDropsTheLastTermsDigest: a replica that leads again drops
// what its last term's open window held, counted by step.
func TestNotifierDropsTheLastTermsDigest(t *testing.T) {
	a, nt := testNotifier(t, testingclock.NewFakeClock(time.Now()), "http://127.0.0.1:1")
	nt.hold(fleet.Notification{Node: "gpu-0", Step: fleet.StepDraining})
	nt.hold(fleet.Notification{Node: "gpu-1", Step: fleet.StepDraining})
	nt.hold(fleet.Notification{Node: "gpu-2", Step: fleet.StepBack})
	a.beginLead()
	if nt.held != nil {
		t.Errorf("after a new term the window holds %d; want none", nt.held.count)
	}
	for step, want := range map[fleet.Step]float64{fleet.StepDraining: 2, fleet.StepBack: 1} {
		if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(step), "dropped")); got != want {
			t.Errorf("%s dropped %v; want %v", step, got, want)
		}
	}
}

// TestDigestBodies: a window that held 26 nodes' draining (in two pools,
// for two reasons), one node's back and a group's draining is one body
// per format: the json format's counts and list (the group first), Slack's
// one text of counts naming 20 ("and 7 more"), one CloudEvent of the
// digest type with the json format's body as its data, and what a
// template makes of .Digest.
func TestDigestBodies(t *testing.T) {
	when := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	b := newBatch()
	var nodes []fleet.Notification
	for i := range 26 {
		x := fleet.Notification{Node: fmt.Sprintf("gpu-%02d", i), Pool: "a4", Step: fleet.StepDraining, Reason: "host-maintenance", When: when.Add(time.Hour), Message: "drains"}
		if i < 11 {
			x.Pool, x.Reason, x.When = "a3", "preemption", when.Add(30*time.Second)
		}
		if i == 25 {
			x.Step, x.When = fleet.StepBack, when.Add(2*time.Hour)
		}
		if i == 5 {
			b.add(fleet.Notification{Group: "b1/s1", Pool: "a3", Step: fleet.StepDraining, Reason: "preemption", When: when, Message: "The group b1/s1 goes down"})
		}
		b.add(x)
		nodes = append(nodes, x)
	}
	group := fleet.Notification{Group: "b1/s1", Pool: "a3", Step: fleet.StepDraining, Reason: "preemption", When: when, Message: "The group b1/s1 goes down"}
	wantDigest := map[string]any{"cluster": "prod", "count": 27.0, "omitted": 0.0,
		"steps":   map[string]any{"draining": 26.0, "back": 1.0},
		"reasons": map[string]any{"host-maintenance": 15.0, "preemption": 12.0},
		"pools":   map[string]any{"a4": 15.0, "a3": 12.0},
		"notifications": func() []any {
			var out []any
			for _, x := range append([]fleet.Notification{group}, nodes...) {
				raw, _ := json.Marshal(x)
				var v any
				_ = json.Unmarshal(raw, &v)
				out = append(out, v)
			}
			return out
		}()}
	text := "*digest* prod: 27 steps: draining 26, back 1; reasons: host-maintenance 15, preemption 12; pools: a4 15, a3 12. group b1/s1 draining"
	for i := range 19 {
		text += fmt.Sprintf(", gpu-%02d draining", i)
	}
	text += " and 7 more"
	tmpl, err := ParseNotifyTemplate("digest", `{{ with .Digest }}{"count": {{ .Count }}, "first": {{ (index .Notifications 0).Group | json }}, "omitted": {{ .Omitted }}, `+
		`"step": {{ $.Step | json }}, "when": {{ rfc3339 $.When | json }}}{{ else }}{"text": {{ .Message | json }}}{{ end }}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		format, contentType string
		want                map[string]any
	}{
		{NotifyJSON, "application/json", wantDigest},
		{NotifySlack, "application/json", map[string]any{"text": text}},
		{NotifyCloudEvents, cloudEventsContentType, map[string]any{"specversion": "1.0", "type": "io.maintenance-handler.maintenance.digest.v1", "source": "maintenance-handler/prod",
			"id": b.id(), "time": "2026-12-01T03:00:00Z", "datacontenttype": "application/json", "data": wantDigest}},
		{NotifyTemplate, "application/json", map[string]any{"count": 27.0, "first": "b1/s1", "omitted": 0.0, "step": "", "when": "2026-12-01T03:00:00Z"}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			_, nt := testNotifier(t, testingclock.NewFakeClock(when), "http://127.0.0.1:1")
			nt.opts.Format, nt.opts.Cluster, nt.opts.Template = tc.format, "prod", tmpl
			got, contentType, _ := decodedBody(t, nt, b)
			if diff := cmp.Diff(tc.want, got); diff != "" || contentType != tc.contentType {
				t.Errorf("Content-Type %q, want %q; body (-want +got):\n%s", contentType, tc.contentType, diff)
			}
		})
	}
}

// TestDigestSaysObserveOnly: a digest of steps decided on nodes observed
// only says so, as each such step's message does, and counts them; one
// that holds some says how many.
func TestDigestSaysObserveOnly(t *testing.T) {
	x := fleet.Notification{Node: "gpu-0", Pool: "a3", Step: fleet.StepDraining, Reason: "preemption", ObserveOnly: true}
	y := x
	y.Node = "gpu-1"
	z := y
	z.Node, z.ObserveOnly = "gpu-2", false
	for _, tc := range []struct {
		held []fleet.Notification
		want string
	}{
		{[]fleet.Notification{x, y}, "Observe-only: 2 steps: draining 2; reasons: preemption 2; pools: a3 2. gpu-0 draining, gpu-1 draining"},
		{[]fleet.Notification{x, y, z}, "3 steps (2 observe-only): draining 3; reasons: preemption 3; pools: a3 3. gpu-0 draining, gpu-1 draining, gpu-2 draining"},
		{[]fleet.Notification{z, z}, "2 steps: draining 2; reasons: preemption 2; pools: a3 2. gpu-2 draining, gpu-2 draining"},
	} {
		b := newBatch()
		for _, n := range tc.held {
			b.add(n)
		}
		d := b.digest()
		if diff := cmp.Diff(tc.want, digestText(d)); diff != "" {
			t.Errorf("text (-want +got):\n%s", diff)
		}
		observed := 0
		for _, n := range tc.held {
			if n.ObserveOnly {
				observed++
			}
		}
		if d.ObserveOnly != observed {
			t.Errorf("counted %d observe-only; want %d", d.ObserveOnly, observed)
		}
	}
}
