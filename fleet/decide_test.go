package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/window"
)

var (
	now     = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	soon    = now.Add(7 * 24 * time.Hour)
	gkeLike = policy.Opportunistic{NodeIdleTime: 600 * time.Second, MinNodes: 3, Window: 2419200 * time.Second}
)

func node(name string, idleFor time.Duration) Node {
	n := Node{Name: name, Pool: "pool-a", Ready: true, NoticePresent: true,
		Notice: maintenance.Notice{Status: maintenance.StatusPending, CanReschedule: true, WindowStart: soon}}
	if idleFor >= 0 {
		n.IdleSince = now.Add(-idleFor)
	} else {
		n.Busy = "accelerators"
	}
	return n
}

func configured(o policy.Opportunistic) policy.Config {
	return policy.Config{Pools: map[string]policy.PoolConfig{"pool-a": {Opportunistic: &o}}}
}

func reasons(p PoolPlan) map[string]Reason {
	out := map[string]Reason{}
	for _, d := range p.Decisions {
		out[d.Node] = d.Reason
	}
	return out
}

// TestDecideGKEExample is the example from GKE's documentation: four nodes,
// node-idle-time=600s, window=2419200s, min-nodes=3; node1 busy, node2 idle
// 60 s, node3 and node4 idle 600 s: exactly one of node3 and node4.
func TestDecideGKEExample(t *testing.T) {
	nodes := []Node{node("node1", -1), node("node2", 60*time.Second), node("node3", 600*time.Second), node("node4", 700*time.Second)}
	plans := Decide(now, configured(gkeLike), nodes)
	if len(plans) != 1 {
		t.Fatalf("plans %+v", plans)
	}
	p := plans[0]
	want := map[string]Reason{"node1": ReasonNotIdle, "node2": ReasonIdleTooShort, "node3": ReasonMinNodes, "node4": ReasonTriggered}
	if d := cmp.Diff(want, reasons(p)); d != "" {
		t.Errorf("reasons (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"node4"}, p.Trigger); d != "" {
		t.Errorf("trigger (-want +got):\n%s", d)
	}
	// Once node4 is in maintenance, nothing more can go.
	nodes[3].InMaintenance = true
	if p := Decide(now, configured(gkeLike), nodes)[0]; len(p.Trigger) != 0 || reasons(p)["node3"] != ReasonMinNodes {
		t.Errorf("with node4 in maintenance: trigger %v, reasons %v", p.Trigger, reasons(p))
	}
}

func TestDecideReasons(t *testing.T) {
	fixed := node("fixed", time.Hour)
	fixed.Notice.CanReschedule = false
	opted := node("opted", time.Hour)
	opted.OptOut = true
	far := node("far", time.Hour)
	far.Notice.WindowStart = now.Add(60 * 24 * time.Hour)
	pinned := node("pinned", -1)
	pinned.Busy = "safe-to-evict"
	notReady := node("down", time.Hour)
	notReady.Ready = false
	failing := node("failing", time.Hour)
	failing.Failures = protocol.Failures{Count: 2, Reason: protocol.ManualPermissionDenied, Last: now.Add(-time.Hour), RetryAfter: now.Add(time.Hour)}
	cooled := node("cooled", time.Hour)
	cooled.Failures = protocol.Failures{Count: 1, Reason: protocol.ManualAbandoned, Last: now.Add(-2 * time.Hour), RetryAfter: now.Add(-time.Hour)}
	garbled := node("garbled", 2*time.Hour) // idle the longest: picked first, were it readable
	garbled.Unreadable = []string{protocol.AnnotationPhase}
	cooled.KnownEnd = now.Add(30 * 24 * time.Hour) // an end long after its window holds nothing
	ending := node("ending", 3*time.Hour)          // idle the longest: picked first, were its VM not about to end
	ending.KnownEnd = now.Add(2 * time.Hour)
	lax := gkeLike
	lax.MinNodes = 0
	plan := Decide(now, configured(lax), []Node{fixed, opted, far, pinned, notReady, failing, cooled, garbled, ending})[0]
	want := map[string]Reason{"fixed": ReasonNotReschedulable, "opted": ReasonOptedOut, "far": ReasonTooEarly, "pinned": ReasonNotEvictable, "down": ReasonNotReady,
		"failing": ReasonCoolingDown, "cooled": ReasonTriggered, "garbled": ReasonUnreadable, "ending": ReasonEndsSoon}
	if d := cmp.Diff(want, reasons(plan)); d != "" || len(plan.Trigger) != 1 {
		t.Errorf("reasons (-want +got):\n%s\ntrigger %v", d, plan.Trigger)
	}
	for _, dec := range plan.Decisions {
		if dec.Reason != ReasonTriggered && !strings.HasPrefix(dec.Message(), "Not picked for opportunistic maintenance: ") {
			t.Errorf("%s: message %q", dec.Node, dec.Message())
		}
	}

	// Windows and exclusions: the exclusion wins.
	idle := []Node{node("idle", time.Hour)}
	cfg := configured(lax)
	cfg.Cluster.Window = &window.Recurring{Start: now.Add(time.Hour), Duration: time.Hour}
	if p := Decide(now, cfg, idle)[0]; reasons(p)["idle"] != ReasonOutsideWindow {
		t.Errorf("outside the window: %v", reasons(p))
	}
	cfg.Cluster.Window.Start = now.Add(-time.Minute)
	if p := Decide(now, cfg, idle)[0]; reasons(p)["idle"] != ReasonTriggered {
		t.Errorf("inside the window: %v", reasons(p))
	}
	pc := cfg.Pools["pool-a"]
	pc.Exclusions = []window.Exclusion{{Name: "freeze", Start: now.Add(-time.Hour), End: now.Add(time.Hour)}}
	cfg.Pools["pool-a"] = pc
	if p := Decide(now, cfg, idle)[0]; reasons(p)["idle"] != ReasonExcluded {
		t.Errorf("inside an exclusion: %v", reasons(p))
	}
}

func TestDecideConfigFromAnnotations(t *testing.T) {
	a, b := node("a", time.Hour), node("b", time.Hour)
	// Unconfigured: nothing decided.
	if p := Decide(now, policy.Config{}, []Node{a, b})[0]; p.Configured || len(p.Decisions) != 0 {
		t.Errorf("unconfigured pool: %+v", p)
	}
	a.Config, b.Config = "node-idle-time=600s,min-nodes=1,window=2419200s", "node-idle-time=600s,min-nodes=1,window=2419200s"
	if p := Decide(now, policy.Config{}, []Node{a, b})[0]; len(p.Trigger) != 1 || p.Setting.MinNodes != 1 {
		t.Errorf("annotated pool: %+v", p)
	}
	b.Config = "node-idle-time=60s,min-nodes=0,window=2419200s"
	p := Decide(now, policy.Config{}, []Node{a, b})[0]
	if !errors.Is(p.ConfigErr, policy.ErrConfig) || len(p.Trigger) != 0 || reasons(p)["a"] != ReasonInvalidConfig {
		t.Errorf("disagreeing nodes: %+v", p)
	}
	a.Config, b.Config = "node-idle-time=10m", "node-idle-time=10m"
	if p := Decide(now, policy.Config{}, []Node{a, b})[0]; p.ConfigErr == nil || len(p.Trigger) != 0 {
		t.Errorf("invalid annotation: %+v", p)
	}
}

func tpuNode(name string, idleFor time.Duration) Node {
	n := node(name, idleFor)
	n.Pool, n.Slice = "tpu-slice", "tpu-slice"
	return n
}

func TestDecideTPUSliceWholeOrNothing(t *testing.T) {
	slice := policy.Opportunistic{NodeIdleTime: 600 * time.Second, Window: 2419200 * time.Second}
	cfg := policy.Config{Pools: map[string]policy.PoolConfig{"tpu-slice": {Opportunistic: &slice}}, MaxVoluntary: policy.Budget{Count: 4}}
	all := []Node{tpuNode("t0", time.Hour), tpuNode("t1", time.Hour), tpuNode("t2", time.Hour), tpuNode("t3", time.Hour)}
	// An idle slice: one trigger, on its first host, which asks Compute
	// Engine once for the slice; the others follow it.
	if p := Decide(now, cfg, all)[0]; !slices.Equal(p.Trigger, []string{"t0"}) || p.Budget.Of(4) != 4 {
		t.Errorf("an idle slice: trigger %v, reasons %v, pool cap %d", p.Trigger, reasons(p), p.Budget.Of(4))
	}
	oneBusy := append([]Node(nil), all...)
	oneBusy[2] = tpuNode("t2", -1)
	p := Decide(now, cfg, oneBusy)[0]
	if len(p.Trigger) != 0 || reasons(p)["t0"] != ReasonSliceIncomplete || reasons(p)["t2"] != ReasonNotIdle {
		t.Errorf("one busy node: trigger %v, reasons %v", p.Trigger, reasons(p))
	}
	// A slice going down already (its first host triggered, the others
	// following): nothing more to decide, and it counts whole.
	down := append([]Node(nil), all...)
	down[0].InMaintenance, down[0].Triggered, down[0].Voluntary = true, true, true
	if p := Decide(now, cfg, down)[0]; len(p.Trigger) != 0 || len(p.Decisions) != 0 || p.Voluntary != 4 {
		t.Errorf("a slice going down: trigger %v, decisions %v, voluntary %d", p.Trigger, p.Decisions, p.Voluntary)
	}
	// Its first host back already, the others still in the slice's
	// maintenance it asked for (begun: host maintenance, counted by the
	// first), their slice ask the aggregator's: the slice counts whole
	// while they carry it.
	begun := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "t1", Labels: map[string]string{protocol.LabelNodePool: "tpu-slice"}}}
	protocol.WriteAgentState(begun, protocol.AgentState{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonHostMaintenance, Started: now, Deadline: now.Add(time.Hour), Begun: true})
	protocol.WriteSliceAsk(begun, &protocol.SliceAsk{Slice: "tpu-slice", Cause: "t0", Reason: protocol.ReasonManual, Started: now, Deadline: now.Add(time.Hour)})
	if v := NodeOf(begun, protocol.Grouping{PoolLabel: protocol.LabelNodePool}); !v.Voluntary {
		t.Errorf("a host in its slice's voluntary maintenance, begun: voluntary %t; want it counted against the caps", v.Voluntary)
	}
	tail := append([]Node(nil), all...)
	for i := 1; i < len(tail); i++ {
		tail[i].InMaintenance, tail[i].Voluntary = true, NodeOf(begun, protocol.Grouping{PoolLabel: protocol.LabelNodePool}).Voluntary
	}
	if p := Decide(now, cfg, tail)[0]; len(p.Trigger) != 0 || p.Voluntary != 4 {
		t.Errorf("the asking host back first: trigger %v, voluntary %d; want the slice counted whole", p.Trigger, p.Voluntary)
	}
	// A host opted out, or cooling down, keeps the whole slice.
	for _, f := range []func(*Node){func(n *Node) { n.OptOut = true }, func(n *Node) { n.Failures.RetryAfter = now.Add(time.Hour) }, func(n *Node) { n.Ready = false }} {
		held := append([]Node(nil), all...)
		f(&held[3])
		if p := Decide(now, cfg, held)[0]; len(p.Trigger) != 0 || reasons(p)["t0"] != ReasonSliceIncomplete {
			t.Errorf("one host not eligible: trigger %v, reasons %v", p.Trigger, reasons(p))
		}
	}
	// The caps count the slice as its hosts: a cluster cap of 3 never
	// lets a 4-host slice go, and says why.
	small := cfg
	small.MaxVoluntary = policy.Budget{Count: 3}
	if p := Decide(now, small, all)[0]; len(p.Trigger) != 0 || reasons(p)["t0"] != ReasonMaxVoluntary {
		t.Errorf("cluster cap 3: trigger %v, reasons %v", p.Trigger, reasons(p))
	}
	// min-nodes must be 0 for a slice.
	bad := slice
	bad.MinNodes = 1
	if p := Decide(now, policy.Config{Pools: map[string]policy.PoolConfig{"tpu-slice": {Opportunistic: &bad}}}, all)[0]; p.ConfigErr == nil || len(p.Trigger) != 0 {
		t.Errorf("min-nodes=1 on a slice: %+v", p)
	}
}

// TestDecideLeavesGKEsNodesToGKE: where GKE's own handler runs (GKE's
// kubelet, 1.31 or later), the aggregator does not act on the
// opportunistic-config annotation, and says so; a pool configured in the
// policy ConfigMap is the aggregator's.
func TestDecideLeavesGKEsNodesToGKE(t *testing.T) {
	for _, tc := range []struct {
		kubelet string
		gke     bool
	}{
		{"v1.36.3", false}, {"v1.30.9-gke.1000", false}, {"v1.31.1-gke.1146000", true}, {"v1.33.2-gke.1240000", true},
		{"v2.0.0-gke.1", true}, {"1.33.2-gke.1", false}, {"v1.x-gke.1", false}, {"", false},
	} {
		if got := lifecycle.GKEHandles(tc.kubelet); got != tc.gke {
			t.Errorf("GKEHandles(%q) = %t", tc.kubelet, got)
		}
	}
	a, b := node("gke-a", time.Hour), node("gke-b", time.Hour)
	a.GKEHandled, b.GKEHandled = true, true
	a.Config, b.Config = "node-idle-time=600s,min-nodes=0,window=2419200s", "node-idle-time=600s,min-nodes=0,window=2419200s"
	plan := Decide(now, policy.Config{}, []Node{a, b})[0]
	if len(plan.Trigger) != 0 || plan.Configured || reasons(plan)["gke-a"] != ReasonGKEHandles || reasons(plan)["gke-b"] != ReasonGKEHandles {
		t.Errorf("annotations on GKE's nodes: trigger %v, configured %t, reasons %v", plan.Trigger, plan.Configured, reasons(plan))
	}
	mixed := node("self-managed", time.Hour)
	mixed.Config = a.Config
	plan = Decide(now, policy.Config{}, []Node{a, mixed})[0]
	if d := cmp.Diff(map[string]Reason{"gke-a": ReasonGKEHandles, "self-managed": ReasonTriggered}, reasons(plan)); d != "" {
		t.Errorf("a mixed pool (-want +got):\n%s", d)
	}
	lax := gkeLike
	lax.MinNodes = 0
	plan = Decide(now, configured(lax), []Node{a, b})[0]
	if len(plan.Trigger) != 1 { // one: the caps
		t.Errorf("a pool in the policy ConfigMap: trigger %v, reasons %v", plan.Trigger, reasons(plan))
	}
}

// TestDecideCapsVoluntaryMaintenance: however many nodes are idle, no more
// are in voluntary maintenance at once than the pool's cap (one by
// default) and the cluster's (a tenth by default); nodes already in a
// voluntary maintenance count.
func TestDecideCapsVoluntaryMaintenance(t *testing.T) {
	pool := func(name string, n int) []Node {
		var out []Node
		for i := range n {
			v := node(fmt.Sprintf("%s-%02d", name, i), time.Hour)
			v.Pool = name
			out = append(out, v)
		}
		return out
	}
	lax := gkeLike
	lax.MinNodes = 0
	triggered := func(plans []PoolPlan) (n int, skipped map[Reason]int) {
		skipped = map[Reason]int{}
		for _, p := range plans {
			n += len(p.Trigger)
			for _, d := range p.Decisions {
				skipped[d.Reason]++
			}
		}
		return n, skipped
	}
	cfgFor := func(o policy.Opportunistic, pools ...string) policy.Config {
		c := policy.Config{Pools: map[string]policy.PoolConfig{}}
		for _, p := range pools {
			c.Pools[p] = policy.PoolConfig{Opportunistic: &o}
		}
		return c
	}
	// 50 idle nodes, min-nodes=0: one at a time by default.
	if n, skipped := triggered(Decide(now, cfgFor(lax, "big"), pool("big", 50))); n != 1 || skipped[ReasonMaxVoluntary] != 49 {
		t.Errorf("default cap: %d triggered, skipped %v", n, skipped)
	}
	// max-unavailable=10%: five of fifty.
	tenth := lax
	tenth.MaxUnavailable = &policy.Budget{Percent: 10}
	if n, _ := triggered(Decide(now, cfgFor(tenth, "big"), pool("big", 50))); n != 5 {
		t.Errorf("max-unavailable=10%%: %d triggered, want 5", n)
	}
	// One already in a voluntary maintenance: none more.
	nodes := pool("big", 50)
	nodes[7].InMaintenance, nodes[7].Voluntary = true, true
	if n, _ := triggered(Decide(now, cfgFor(lax, "big"), nodes)); n != 0 {
		t.Errorf("with one in flight: %d triggered, want 0", n)
	}
	// The cluster's cap across pools: 3 in all, whatever the pools allow.
	two := lax
	two.MaxUnavailable = &policy.Budget{Count: 2}
	cfg := cfgFor(two, "a", "b")
	cfg.MaxVoluntary = policy.Budget{Count: 3}
	if n, skipped := triggered(Decide(now, cfg, append(pool("a", 10), pool("b", 10)...))); n != 3 || skipped[ReasonMaxVoluntary] != 17 {
		t.Errorf("cluster cap 3: %d triggered, skipped %v", n, skipped)
	}
	// The default cluster cap: a tenth of the nodes.
	cfg.MaxVoluntary = policy.Budget{}
	many := lax
	many.MaxUnavailable = &policy.Budget{Percent: 100}
	if n, _ := triggered(Decide(now, cfgFor(many, "a", "b"), append(pool("a", 20), pool("b", 20)...))); n != 4 {
		t.Errorf("default cluster cap on 40 nodes: %d triggered, want 4", n)
	}
}

// TestDecideInvalidPoolAffectsOnlyThatPool: a pool whose part of the
// ConfigMap is invalid gets no action and is told why; the other pools act.
func TestDecideInvalidPoolAffectsOnlyThatPool(t *testing.T) {
	cfg, err := policy.ParseConfig(`
pools:
  good: {opportunistic: "node-idle-time=600s,min-nodes=0,window=2419200s"}
  bad: {opportunistic: "min-nodes=0"}
`)
	if err != nil {
		t.Fatal(err)
	}
	good, bad := node("good-0", time.Hour), node("bad-0", time.Hour)
	good.Pool, bad.Pool = "good", "bad"
	plans := Decide(now, cfg, []Node{good, bad})
	for _, p := range plans {
		switch p.Pool {
		case "good":
			if len(p.Trigger) != 1 || p.ConfigErr != nil {
				t.Errorf("the good pool: trigger %v, error %v", p.Trigger, p.ConfigErr)
			}
		case "bad":
			if len(p.Trigger) != 0 || p.ConfigErr == nil || reasons(p)["bad-0"] != ReasonInvalidConfig {
				t.Errorf("the bad pool: trigger %v, error %v, reasons %v", p.Trigger, p.ConfigErr, reasons(p))
			}
		}
	}
}

// TestDecideSkipsAutoscaledPools: a pool whose node group the cluster
// autoscaler's status lists, or that the policy declares autoscaled, gets
// no trigger, every pending node told why, unless the policy opts in; a
// declaration of false wins over the status.
func TestDecideSkipsAutoscaledPools(t *testing.T) {
	in := func(pool, group string) Node {
		n := node(pool+"-0", time.Hour)
		n.Pool, n.AutoscalerGroup = pool, group
		return n
	}
	o := policy.Opportunistic{NodeIdleTime: time.Minute, Window: 2419200 * time.Second}
	yes, no := true, false
	cfg := policy.Config{MaxVoluntary: policy.Budget{Percent: 100}, Pools: map[string]policy.PoolConfig{
		"detected":  {Opportunistic: &o},
		"declared":  {Opportunistic: &o, Autoscaled: &yes},
		"opted-in":  {Opportunistic: &o, WhenAutoscaled: &yes},
		"overruled": {Opportunistic: &o, Autoscaled: &no},
		"plain":     {Opportunistic: &o},
	}}
	plans := Decide(now, cfg, []Node{in("detected", "gke-c-detected-grp"), in("declared", ""), in("opted-in", "gke-c-opted-in-grp"),
		in("overruled", "gke-c-overruled-grp"), in("plain", "")})
	got := map[string]Reason{}
	scaled := map[string]bool{}
	for _, p := range plans {
		for n, r := range reasons(p) {
			got[n] = r
		}
		scaled[p.Pool] = p.Autoscaled
	}
	want := map[string]Reason{"detected-0": ReasonAutoscaled, "declared-0": ReasonAutoscaled, "opted-in-0": ReasonTriggered,
		"overruled-0": ReasonTriggered, "plain-0": ReasonTriggered}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reasons (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]bool{"detected": true, "declared": true, "opted-in": true, "overruled": false, "plain": false}, scaled); d != "" {
		t.Errorf("autoscaled (-want +got):\n%s", d)
	}
	for _, p := range plans {
		for _, d := range p.Decisions {
			if d.Node == "detected-0" && !strings.Contains(d.Message(), "gke-c-detected-grp") {
				t.Errorf("the message does not name the node group: %s", d.Message())
			}
		}
	}
}
