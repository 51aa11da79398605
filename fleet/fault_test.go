package fleet

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestDecideFaults: a condition counts once it has held for its duration
// (the plan says when the next will); a person's request comes first and
// is not held by the cool-down after a repair that went through (which
// removed the last request), but is after one that failed; the pool's cap
// holds the rest; a node under another maintenance waits; an invalid
// request is answered; a tainted node no longer faulty is untainted; a
// node in repair counts against the cap, its request standing.
func TestDecideFaults(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig(`
pools:
  a3:
    faults:
      conditions:
      - type: GPUUnhealthy
        for: 2m
        behavior: UNRECOVERABLE_GPU_ERROR
      maxInRepair: "2"
      cooldown: 1h
`)
	if err != nil {
		t.Fatal(err)
	}
	bad := func(name string, since time.Duration) Node {
		return Node{Name: name, Pool: "a3", Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-since), Written: now}}}
	}
	var ended func(name, outcome string, written time.Duration) Node
	// repaired is a node repaired 90 minutes ago (past the cool-down) whose
	// condition, true for two hours, its detector last wrote written ago.
	repaired := func(name string, written time.Duration) Node {
		return ended(name, protocol.RepairDone, written)
	}
	// ended is the same node, its last repair ended with outcome.
	ended = func(name, outcome string, written time.Duration) Node {
		return Node{Name: name, Pool: "a3", FaultTaint: true, LastRepair: protocol.LastFaultRepair{Outcome: outcome, Ended: now.Add(-90 * time.Minute)},
			Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-2 * time.Hour), Written: now.Add(-written)}}}
	}
	nodes := []Node{
		bad("a-held", 5*time.Minute),
		bad("b-held", 3*time.Minute),
		bad("c-young", time.Minute),
		{Name: "d-person", Pool: "a3", ReportFaulty: protocol.BehaviorPerformance, ReportFaultySet: true, ReportDescription: "slow allreduce",
			LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: now.Add(-time.Minute)}},
		{Name: "e-invalid", Pool: "a3", ReportFaulty: "XID", ReportFaultySet: true},
		{Name: "e-person-refused", Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true,
			LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairPermissionDenied, Ended: now.Add(-time.Minute)}},
		{Name: "f-healed", Pool: "a3", FaultTaint: true},
		repaired("i-stale", 2*time.Hour),
		repaired("j-written-again", 5*time.Minute),
		// A repair that failed repaired nothing: the condition still holds.
		ended("k-refused-stands", protocol.RepairPermissionDenied, 2*time.Hour),
		// A repair another maintenance overtook a minute ago: no cool-down.
		{Name: "l-overtaken", Pool: "a3", FaultTaint: true, Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-2 * time.Hour), Written: now.Add(-2 * time.Hour)}},
			LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairOvertaken, Ended: now.Add(-time.Minute), By: string(protocol.ReasonHostMaintenance)}},
		{Name: "g-cooling", Pool: "a3", Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-time.Hour), Written: now}},
			LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairFailed, Ended: now.Add(-10 * time.Minute)}},
		{Name: "h-maintained", Pool: "a3", Underway: true, InMaintenance: true, Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-time.Hour)}}},
		{Name: "x-other-pool", Pool: "n2", Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-time.Hour)}}},
	}
	plan := DecideFaults(now, cfg, nodes)
	got := map[string]FaultReason{}
	for _, f := range plan.Faults {
		got[f.Node] = f.Reason
		if f.Message == "" {
			t.Errorf("%s: no message", f.Node)
		}
	}
	// A person's request first, then the oldest fault (j, k and l since
	// two hours, j first by name): a's since five minutes waits.
	want := map[string]FaultReason{"d-person": FaultApproved, "a-held": FaultMaxInRepair, "b-held": FaultMaxInRepair,
		"e-invalid": FaultInvalidRequest, "e-person-refused": FaultCoolingDown, "g-cooling": FaultCoolingDown, "h-maintained": FaultUnderWay,
		"j-written-again": FaultApproved, "k-refused-stands": FaultMaxInRepair, "l-overtaken": FaultMaxInRepair}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"f-healed", "i-stale"}, plan.Untaint); d != "" {
		t.Errorf("untainted (-want +got):\n%s", d)
	}
	if want := now.Add(time.Minute); !plan.NextCheck.Equal(want) {
		t.Errorf("next check %s, want %s (when c-young's condition has held 2m)", plan.NextCheck, want)
	}
	for _, f := range plan.Faults {
		if f.Node == "d-person" && (f.Approval.Source != protocol.FaultSourcePerson || f.Approval.Behavior != protocol.BehaviorPerformance ||
			!f.Approval.Approved.Equal(now) || f.Approval.DrainTimeout != protocol.Duration(30*time.Minute)) {
			t.Errorf("the person's approval: %+v", f.Approval)
		}
	}
	// Once approved, the two count against the cap: b waits still.
	for i := range nodes {
		for _, f := range plan.Faults {
			if f.Node == nodes[i].Name && f.Reason == FaultApproved {
				a := f.Approval
				nodes[i].Repair = &a
			}
		}
	}
	again := DecideFaults(now, cfg, nodes)
	if again.InRepair["a3"] != 2 {
		t.Errorf("in repair %v, want 2 in a3", again.InRepair)
	}
	for _, f := range again.Faults {
		if f.Reason == FaultApproved {
			t.Errorf("%s approved past the cap", f.Node)
		}
	}
}

// TestDecideFaultsOnPrediction: GKE's health prediction is acted on where
// the policy opts in, for idle nodes only.
func TestDecideFaultsOnPrediction(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    healthPrediction: PERFORMANCE\n    maxInRepair: \"5\"\n")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{
		{Name: "idle", Pool: "a4", PredictedToDegrade: true, IdleSince: now.Add(-time.Hour)},
		{Name: "busy", Pool: "a4", PredictedToDegrade: true, Busy: protocol.BusyAccelerators},
		{Name: "healthy", Pool: "a4", IdleSince: now.Add(-time.Hour)},
	}
	plan := DecideFaults(now, cfg, nodes)
	if len(plan.Faults) != 1 || plan.Faults[0].Node != "idle" || plan.Faults[0].Reason != FaultApproved ||
		plan.Faults[0].Approval.Source != protocol.FaultSourcePrediction || plan.Faults[0].Approval.Behavior != protocol.BehaviorPerformance {
		t.Errorf("faults %+v; want the idle predicted node approved, as PERFORMANCE from the prediction", plan.Faults)
	}
	if plan := DecideFaults(now, policy.Config{}, nodes); len(plan.Faults) != 0 {
		t.Errorf("without the policy's opt-in: %+v, want none", plan.Faults)
	}
}

// TestDecideFaultsRate: the pool's repairRate counts the nodes in repair
// and those whose repair the aggregator approved within its window.
func TestDecideFaultsRate(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    repairRate: 2/168h\n")
	if err != nil {
		t.Fatal(err)
	}
	asked := func(name string) Node {
		return Node{Name: name, Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true}
	}
	nodes := []Node{asked("a"), asked("b"),
		{Name: "old", Pool: "a3", Approved: map[string]time.Time{"a3": now.Add(-200 * time.Hour)}},
		{Name: "recent", Pool: "a3", Approved: map[string]time.Time{"a3": now.Add(-time.Hour)}}}
	got := map[string]FaultReason{}
	for _, f := range DecideFaults(now, cfg, nodes).Faults {
		got[f.Node] = f.Reason
	}
	if d := cmp.Diff(map[string]FaultReason{"a": FaultApproved, "b": FaultRateLimited}, got); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	// A deposed leader's approval that may still land (a live claim)
	// counts too: with it, the rate is used up.
	nodes = append(nodes, Node{Name: "claimed", Pool: "a3", Claimed: true})
	for _, f := range DecideFaults(now, cfg, nodes).Faults {
		if f.Reason == FaultApproved {
			t.Errorf("%s approved past the rate, a live claim besides", f.Node)
		}
	}
}

// TestDecideFaultsForgedRepairTakesNoPlace: a node that claims a repair
// under way on its own (its agent's phase, no approval, not tainted
// faulty) takes no place under its pool's maxInRepair: the real faulty
// node is approved; nor does one the aggregator tainted on its own word.
// One whose report the relay accepted (its approval withdrawn with the
// answer) still does.
func TestDecideFaultsForgedRepairTakesNoPlace(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"1\"\n")
	if err != nil {
		t.Fatal(err)
	}
	asked := Node{Name: "real", Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true}
	forged := Node{Name: "forged", Pool: "a3", Phase: protocol.PhaseDraining, Reason: protocol.ReasonFault}
	plan := DecideFaults(now, cfg, []Node{asked, forged})
	if len(plan.Faults) != 1 || plan.Faults[0].Reason != FaultApproved || plan.InRepair["a3"] != 1 {
		t.Errorf("faults %+v, in repair %v; want the real node approved, the forged repair not counted", plan.Faults, plan.InRepair)
	}
	withdrawn := forged
	withdrawn.FaultTaint = true
	plan = DecideFaults(now, cfg, []Node{asked, withdrawn})
	if len(plan.Faults) != 1 || plan.Faults[0].Reason != FaultApproved {
		t.Errorf("faults %+v; want the real node approved: a tainted node's repair takes a place only once the relay accepted its report", plan.Faults)
	}
	withdrawn.ReportUntil = now.Add(time.Hour)
	plan = DecideFaults(now, cfg, []Node{asked, withdrawn})
	if len(plan.Faults) != 1 || plan.Faults[0].Reason != FaultMaxInRepair {
		t.Errorf("faults %+v; want the real node to wait for the tainted node's repair under way", plan.Faults)
	}
}

// TestDecideFaultsFutureRepairFillsNoRate: a last repair its agent says
// ends in the future (a node's own word: no repair ends after now) takes
// no place under its pool's repairRate, and the plan names the node, to
// be said as an unreadable value; nor does a past one within the window,
// which is the agent's word too.
func TestDecideFaultsFutureRepairFillsNoRate(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    repairRate: 1/168h\n")
	if err != nil {
		t.Fatal(err)
	}
	asked := Node{Name: "real", Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true}
	for _, tc := range []struct {
		name         string
		ended        time.Time
		want         FaultReason
		unbelievable []string
	}{
		{name: "ended a year ahead", ended: now.Add(365 * 24 * time.Hour), want: FaultApproved, unbelievable: []string{"liar"}},
		{name: "ended a second ahead", ended: now.Add(time.Second), want: FaultApproved, unbelievable: []string{"liar"}},
		{name: "ended an hour ago", ended: now.Add(-time.Hour), want: FaultApproved},
		{name: "ended now", ended: now, want: FaultApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := Node{Name: "liar", Pool: "a3", LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: tc.ended}}
			plan := DecideFaults(now, cfg, []Node{asked, other})
			var got []FaultReason
			for _, f := range plan.Faults {
				got = append(got, f.Reason)
			}
			if d := cmp.Diff([]FaultReason{tc.want}, got); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.unbelievable, plan.Unbelievable); d != "" {
				t.Errorf("unbelievable (-want +got):\n%s", d)
			}
		})
	}
}

// TestDecideFaultsRateCountsOwnRecord: a pool's repairRate (one a week)
// counts only the repairs the aggregator approved, against the pool it
// approved them in: never the agent's word of its last repair (ended
// "now", written again and again), neither emptied nor moved by a Node
// that registers again under another pool's label, and kept past the Node
// object's deletion (kept, by name), each node once.
func TestDecideFaultsRateCountsOwnRecord(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    repairRate: 1/168h\n")
	if err != nil {
		t.Fatal(err)
	}
	asked := func(name, pool string) Node {
		return Node{Name: name, Pool: pool, ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true}
	}
	approved := func(pool string, ago time.Duration) map[string]time.Time {
		return map[string]time.Time{pool: now.Add(-ago)}
	}
	for _, tc := range []struct {
		name  string
		other Node
		kept  Kept
		want  map[string]FaultReason
	}{
		{name: "the agent says its repair ended now",
			other: Node{Name: "liar", Pool: "a3", LastRepair: protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: now}},
			want:  map[string]FaultReason{"real": FaultApproved, "b-real": FaultApproved}},
		{name: "the aggregator approved one in the pool an hour ago",
			other: Node{Name: "repaired", Pool: "a3", Approved: approved("a3", time.Hour)},
			want:  map[string]FaultReason{"real": FaultRateLimited, "b-real": FaultApproved}},
		{name: "approved in a3, its Node registered again in pool b",
			other: Node{Name: "moved", Pool: "b", Approved: approved("a3", time.Hour)},
			want:  map[string]FaultReason{"real": FaultRateLimited, "b-real": FaultApproved}},
		{name: "approved past the window",
			other: Node{Name: "repaired", Pool: "a3", Approved: approved("a3", 200*time.Hour)},
			want:  map[string]FaultReason{"real": FaultApproved, "b-real": FaultApproved}},
		{name: "approved in a3, its Node deleted (kept by name)",
			kept: Kept{"gone": approved("a3", time.Hour)},
			want: map[string]FaultReason{"real": FaultRateLimited, "b-real": FaultApproved}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []Node{asked("real", "a3"), asked("b-real", "b")}
			if tc.other.Name != "" {
				nodes = append(nodes, tc.other)
			}
			var f Fleet
			for _, n := range nodes {
				f.Set(n)
			}
			got := map[string]FaultReason{}
			for _, x := range f.DecideFaults(now, cfg, tc.kept).Faults {
				got[x.Node] = x.Reason
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
}

// TestDecideFaultsRateCountsANodeOnce: a node counts once against a pool's
// repairRate (two a week), whether its approval is on its Node, kept from
// its deleted Node, or both, and while it is in repair.
func TestDecideFaultsRateCountsANodeOnce(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    repairRate: 2/168h\n")
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]time.Time{"a3": now.Add(-time.Hour)}
	repairing := Node{Name: "twice", Pool: "a3", Approved: at, Repair: &protocol.RepairApproval{Behavior: protocol.BehaviorChipError}, FaultTaint: true}
	var f Fleet
	f.Set(repairing)
	f.Set(Node{Name: "real", Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true})
	plan := f.DecideFaults(now, cfg, Kept{"twice": at})
	if len(plan.Faults) != 1 || plan.Faults[0].Reason != FaultApproved {
		t.Errorf("faults %+v; want the real node approved (the other counted once)", plan.Faults)
	}
}
