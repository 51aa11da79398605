package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/window"
)

// TestFleetDecidesAsDecide plays random histories of a small fleet (nodes
// set, changed, moved, deleted, amended for a pass; the configuration
// changed; time moving on by seconds to hours) and holds, at every pass,
// that the Fleet's plans are Decide's over every node, that the messages
// of the plans it made anew are Decide's, that its faults' decision (over
// the pools with a node that may take part) is DecideFaults' over every
// node, as are its slice asks and the nodes it finds marked, and that a
// pass after which nothing changed decides no pool again.
func TestFleetDecidesAsDecide(t *testing.T) {
	histories := 500
	if testing.Short() {
		histories = 100
	}
	for seed := range uint64(histories) {
		r := rand.New(rand.NewPCG(seed, 7))
		var f Fleet
		last := map[string]PoolPlan{} // each pool's plan in the pass before
		at := now
		cfg := randomConfig(r, at)
		cfg.Version = "start" // as its source names each policy: a new one, a new version
		for i := range 4 + r.IntN(12) {
			f.Set(randomNode(r, fmt.Sprintf("n%02d", i), at))
		}
		for step := range 40 {
			moved := map[string]bool{} // the pools a node came to or went from since the pass before
			set := func(n Node) {
				if was := f.Node(n.Name); was == nil || was.Pool != n.Pool {
					moved[n.Pool] = true
					if was != nil {
						moved[was.Pool] = true
					}
				}
				f.Set(n)
			}
			for range 1 + r.IntN(2) { // now and then a node gone and another come between passes
				what := r.IntN(20) // mostly nothing but time moves on
				switch {
				case what < 3:
					names := f.All()
					n := *names[r.IntN(len(names))]
					set(randomNode(r, n.Name, at))
				case what == 3 && f.Len() > 2:
					names := f.All()
					gone := names[r.IntN(len(names))]
					moved[gone.Pool] = true
					f.Delete(gone.Name)
				case what == 4:
					set(randomNode(r, fmt.Sprintf("n%02d", 20+r.IntN(10)), at))
				case what == 5:
					cfg = randomConfig(r, at)
					cfg.Version = fmt.Sprintf("step-%d", step)
				}
			}
			f.Restore()
			amended := r.IntN(8) == 0
			if amended { // a claim, as the aggregator amends a pass's nodes
				names := f.All()
				f.Amend(names[r.IntN(len(names))].Name, func(n *Node) { n.Voluntary, n.InMaintenance, n.Claimed = true, true, true })
			}
			at = at.Add([]time.Duration{0, time.Second, time.Minute, 10 * time.Minute, 3 * time.Hour}[r.IntN(5)])
			got := f.Decide(at, cfg)
			var all []Node
			for _, n := range f.All() {
				all = append(all, *n)
			}
			want := Decide(at, cfg, all)
			if d := cmp.Diff(want, got, ignorePlanIDs, cmpopts.IgnoreFields(Decision{}, "message"), cmp.AllowUnexported(Decision{}), cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) })); d != "" {
				t.Fatalf("seed %d, step %d: the Fleet's plans differ from Decide's (-Decide +Fleet):\n%s", seed, step, d)
			}
			for _, p := range got {
				before, ok := last[p.Pool]
				last[p.Pool] = p
				if ok && p.ID != before.ID { // made anew
					if p.Since == 0 && !moved[p.Pool] {
						t.Fatalf("seed %d, step %d: pool %s's nodes are those of its plan before, and its plan does not say what changed since", seed, step, p.Pool)
					}
					if p.Since == 0 {
						continue
					}
					if p.Since != before.ID {
						t.Fatalf("seed %d, step %d: pool %s's plan is since plan %d, and the plan before was %d", seed, step, p.Pool, p.Since, before.ID)
					}
					changed, dropped := planDiff(before, p)
					if d := cmp.Diff([2]any{changed, dropped}, [2]any{p.Changed, p.Dropped}, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
						t.Fatalf("seed %d, step %d: pool %s: what changed since the plan before (-compared +Fleet):\n%s", seed, step, p.Pool, d)
					}
				}
			}
			if d := cmp.Diff(DecideFaults(at, cfg, all), f.DecideFaults(at, cfg, nil)); d != "" {
				t.Fatalf("seed %d, step %d: the Fleet's faults differ from DecideFaults' (-DecideFaults +Fleet):\n%s", seed, step, d)
			}
			if d := cmp.Diff(sliceAsks(f.All(), at, confirmAll), f.SliceAsks(at, confirmAll)); d != "" {
				t.Fatalf("seed %d, step %d: the Fleet's slice asks differ from those over every node (-all +Fleet):\n%s", seed, step, d)
			}
			for _, m := range []Mark{MarkAsked, MarkUnreadable} {
				want := slices.DeleteFunc(slices.Clone(f.All()), func(n *Node) bool { return marks(n)&m == 0 })
				if d := cmp.Diff(want, slices.Collect(f.Marked(m)), cmpopts.EquateEmpty()); d != "" {
					t.Fatalf("seed %d, step %d: the nodes marked %d differ from those of every node (-all +Fleet):\n%s", seed, step, m, d)
				}
			}
			fresh, _ := f.Changes()
			for _, p := range fresh { // what an announcement reads is what Decide says now
				for i, d := range p.Decisions {
					if w := decisionOf(want, p.Pool, i); d.Message() != w.Message() {
						t.Fatalf("seed %d, step %d: %s: message %q, want %q", seed, step, d.Node, d.Message(), w.Message())
					}
				}
			}
			for _, p := range f.Decide(at, cfg) {
				last[p.Pool] = p
			}
			if again, _ := f.Changes(); !amended && len(again) != 0 {
				t.Fatalf("seed %d, step %d: nothing changed, and %d pools were decided again", seed, step, len(again))
			}
		}
	}
}

// ignorePlanIDs: Decide's plans have no ID, nor say what changed.
var ignorePlanIDs = cmpopts.IgnoreFields(PoolPlan{}, "ID", "Since", "Changed", "Dropped")

// planDiff is how plan differs from before: its decisions new or of
// another reason (by index), and the nodes before decided about and it
// does not.
func planDiff(before, plan PoolPlan) (changed []int, dropped []string) {
	was, is := reasons(before), reasons(plan)
	for i, d := range plan.Decisions {
		if r, ok := was[d.Node]; !ok || r != d.Reason {
			changed = append(changed, i)
		}
	}
	for name := range was {
		if _, ok := is[name]; !ok {
			dropped = append(dropped, name)
		}
	}
	return changed, dropped
}

func decisionOf(plans []PoolPlan, pool string, i int) Decision {
	for _, p := range plans {
		if p.Pool == pool {
			return p.Decisions[i]
		}
	}
	return Decision{message: func() string { return "" }}
}

// TestFleetDecidesOnlyWhatChanged: in a fleet of 20 pools, a change of one
// node decides its pool alone again; a node moved decides both pools;
// time alone decides again a pool whose node's idle time is reached.
func TestFleetDecidesOnlyWhatChanged(t *testing.T) {
	var f Fleet
	cfg := policy.Config{MaxVoluntary: policy.Budget{Percent: 100}, Version: "1"}
	for i := range 200 {
		n := node(fmt.Sprintf("n%03d", i), -1)
		n.Pool, n.Config = fmt.Sprintf("pool-%02d", i/10), "node-idle-time=600s,min-nodes=5,window=2419200s,max-unavailable=2"
		f.Set(n)
	}
	decided := func() []string {
		fresh, _ := f.Changes()
		var out []string
		for _, p := range fresh {
			out = append(out, p.Pool)
		}
		return out
	}
	f.Decide(now, cfg)
	if got := decided(); len(got) != 20 {
		t.Fatalf("first pass decided %d pools, want 20", len(got))
	}
	idle := *f.Node("n042")
	idle.Busy, idle.IdleSince = "", now.Add(-5*time.Minute)
	f.Set(idle)
	f.Decide(now, cfg)
	if d := cmp.Diff([]string{"pool-04"}, decided()); d != "" {
		t.Errorf("after one node's change (-want +got):\n%s", d)
	}
	moved := *f.Node("n150")
	moved.Pool = "pool-03"
	f.Set(moved)
	f.Decide(now, cfg)
	if d := cmp.Diff([]string{"pool-03", "pool-15"}, decided()); d != "" {
		t.Errorf("after a node moved (-want +got):\n%s", d)
	}
	f.Decide(now.Add(4*time.Minute), cfg)
	if got := decided(); len(got) != 0 {
		t.Errorf("4 minutes on, decided %v again; want none", got)
	}
	plans := f.Decide(now.Add(5*time.Minute), cfg)
	if d := cmp.Diff([]string{"pool-04"}, decided()); d != "" {
		t.Errorf("once n042's idle time is reached (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"n042"}, plans[4].Trigger); d != "" {
		t.Errorf("pool-04 triggers (-want +got):\n%s", d)
	}
}

// TestFleetFindsANodeAgainWhenWhatItReadChanges: what a pool's decision
// found of a node it keeps only while what it read holds: the pool's idle
// time, its window, where its setting comes from, its exclusions, and now
// before the moment a node's answer turns. Each changed alone changes one
// node's decision, and the Fleet's plan is Decide's, messages included.
func TestFleetFindsANodeAgainWhenWhatItReadChanges(t *testing.T) {
	setting := policy.Opportunistic{NodeIdleTime: 300 * time.Second, Window: 30 * 24 * time.Hour}
	with := func(change func(*policy.Opportunistic)) policy.Config {
		o := setting
		change(&o)
		return configured(o)
	}
	base := configured(setting)
	excluded := configured(setting)
	excluded.Cluster.Exclusions = []window.Exclusion{{Name: "freeze", Start: now.Add(-time.Hour), End: now.Add(time.Hour)}}
	sixDays := with(func(o *policy.Opportunistic) { o.Window = 6 * 24 * time.Hour })
	cases := map[string]struct {
		from, to policy.Config
		at       time.Time
		changes  string // the node whose decision changes
	}{
		"a longer idle time":                     {base, with(func(o *policy.Opportunistic) { o.NodeIdleTime = 20 * time.Minute }), now, "idle-10m"},
		"a shorter window":                       {base, with(func(o *policy.Opportunistic) { o.Window = 3 * 24 * time.Hour }), now, "idle-2h"},
		"the setting from the nodes' annotation": {base, policy.Config{}, now, "gke"},
		"an exclusion now":                       {base, excluded, now, "idle-2h"},
		"a cool-down over":                       {base, base, now.Add(2 * time.Hour), "cooling"},
		"a known end near":                       {base, base, now.Add(8*24*time.Hour - 5*time.Hour), "ends"},
		"the window now open":                    {sixDays, sixDays, now.Add(2 * 24 * time.Hour), "idle-2h"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var f Fleet
			nodes := []Node{node("idle-10m", 10*time.Minute), node("gke", 2*time.Hour), node("idle-2h", 2*time.Hour),
				node("busy", -1), node("cooling", 2*time.Hour), node("ends", 2*time.Hour)}
			nodes[1].GKEHandled = true
			nodes[4].Failures.RetryAfter = now.Add(time.Hour)
			nodes[5].KnownEnd = now.Add(8 * 24 * time.Hour) // a day after its window starts
			for i := range nodes {
				nodes[i].Config = setting.String()
				f.Set(nodes[i])
			}
			from, to := c.from, c.to
			from.Version, to.Version = "from", "to" // the source's versions: a policy written again
			before := reasons(f.Decide(now, from)[0])
			got := f.Decide(c.at, to)
			var all []Node
			for _, n := range f.All() {
				all = append(all, *n)
			}
			want := Decide(c.at, c.to, all)
			if d := cmp.Diff(want, got, ignorePlanIDs, cmpopts.IgnoreFields(Decision{}, "message"), cmp.AllowUnexported(Decision{})); d != "" {
				t.Fatalf("the Fleet's plan differs from Decide's (-Decide +Fleet):\n%s", d)
			}
			if after := reasons(want[0]); before[c.changes] == after[c.changes] {
				t.Fatalf("%s was %s before and after: the case changes nothing", c.changes, after[c.changes])
			}
			for i, d := range got[0].Decisions {
				if w := want[0].Decisions[i]; d.Message() != w.Message() {
					t.Errorf("%s: message %q, want %q", d.Node, d.Message(), w.Message())
				}
			}
		})
	}
}

func randomNode(r *rand.Rand, name string, at time.Time) Node {
	n := Node{Name: name, UID: types.UID("u-" + name), Pool: fmt.Sprintf("pool-%d", r.IntN(3)), Ready: r.IntN(8) != 0,
		NoticePresent: r.IntN(5) != 0,
		Notice: maintenance.Notice{Status: maintenance.StatusPending, CanReschedule: r.IntN(8) != 0,
			WindowStart: at.Add(time.Duration(r.IntN(40)) * 24 * time.Hour)}}
	switch r.IntN(3) {
	case 0:
		n.Busy = protocol.BusyAccelerators
	case 1:
		n.IdleSince = at.Add(-time.Duration(r.IntN(30)) * time.Minute)
	}
	n.InMaintenance = r.IntN(6) == 0
	n.Voluntary = n.InMaintenance && r.IntN(2) == 0
	n.OptOut = r.IntN(12) == 0
	n.GKEHandled = r.IntN(12) == 0
	if r.IntN(6) == 0 {
		n.Failures.RetryAfter = at.Add(time.Duration(r.IntN(120)) * time.Minute)
	}
	if r.IntN(6) == 0 {
		n.KnownEnd = at.Add(time.Duration(r.IntN(48)) * time.Hour)
	}
	if r.IntN(10) == 0 {
		n.Unreadable = []string{protocol.AnnotationIdleSince}
	}
	// Now and then a fault, or a repair.
	switch r.IntN(12) {
	case 0:
		n.Conditions = []Condition{{Type: "GPUUnhealthy", Status: []string{"True", "False"}[r.IntN(2)], Since: at.Add(-time.Duration(r.IntN(20)) * time.Minute)}}
	case 1:
		n.ReportFaulty, n.ReportFaultySet = []string{protocol.BehaviorChipError, "broken"}[r.IntN(2)], true
	case 2:
		n.FaultTaint = true
	case 3:
		n.PredictedToDegrade = true
	case 4:
		n.Repair = &protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourcePerson}
	case 5:
		n.LastRepair = protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: at.Add(-time.Duration(r.IntN(48)) * time.Hour)}
	}
	// The pools' settings; now and then a node disagrees.
	n.Config = map[string]string{"pool-0": "node-idle-time=600s,min-nodes=1,window=2419200s,max-unavailable=2", "pool-2": "node-idle-time=900s,min-nodes=0,window=604800s"}[n.Pool]
	if r.IntN(15) == 0 {
		n.Config = "node-idle-time=60s,min-nodes=0,window=86400s"
	}
	if n.Pool == "pool-2" && r.IntN(2) == 0 || r.IntN(20) == 0 { // slices of two hosts, rarely across pools
		n.Slice, n.SliceHosts = fmt.Sprintf("slice-%d", r.IntN(2)), 2
		n.SliceUnproven = r.IntN(4) == 0 // labelled in, no fact behind it
	}
	n.Asked = r.IntN(10) == 0
	return n
}

func randomConfig(r *rand.Rand, at time.Time) policy.Config {
	cfg := policy.Config{MaxVoluntary: policy.Budget{Count: 1 + r.IntN(4)}, ClusterFaults: &policy.Faults{
		Conditions:  []policy.FaultCondition{{Type: "GPUUnhealthy", Status: "True", For: 10 * time.Minute, Behavior: protocol.BehaviorChipError}},
		MaxInRepair: policy.Budget{Count: 1 + r.IntN(2)}, Cooldown: time.Hour, RateCount: r.IntN(3), RateWindow: 24 * time.Hour, Prediction: protocol.BehaviorChipError}}
	if r.IntN(2) == 0 {
		cfg.Cluster.Exclusions = []window.Exclusion{{Name: "freeze", Start: at.Add(time.Duration(1+r.IntN(5)) * time.Hour), End: at.Add(time.Duration(6+r.IntN(6)) * time.Hour)}}
	}
	if r.IntN(3) != 0 {
		o := policy.Opportunistic{NodeIdleTime: time.Duration(300+900*r.IntN(2)) * time.Second, Window: time.Duration(7+23*r.IntN(2)) * 24 * time.Hour}
		cfg.Pools = map[string]policy.PoolConfig{"pool-1": {Opportunistic: &o}}
	}
	return cfg
}
