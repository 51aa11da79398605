package aggregator

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestLedger: deletions and creations, in order, on a fake clock, and what
// the ledger then counts: repairs (a Node created again under its name
// within the window, whatever it was when it went) and vanished nodes (one
// deleted while NotReady and outside maintenance, not back within the
// window; a scale-down or a decommission is neither).
func TestLedger(t *testing.T) {
	const window = time.Hour
	node := func(name, uid string, ready bool, change func(*corev1.Node)) *corev1.Node {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
		if change != nil {
			change(n)
		}
		return n
	}
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	scaledDown := func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: protocol.TaintToBeDeleted, Effect: corev1.TaintEffectNoSchedule}}
	}
	draining := func(n *corev1.Node) {
		n.Labels = map[string]string{protocol.LabelActiveMaintenance: protocol.ValueOngoing}
	}
	type event struct {
		after   time.Duration // since the previous event
		deleted *corev1.Node
		added   *corev1.Node
	}
	for _, tc := range []struct {
		name         string
		events       []event
		then         time.Duration // after the last event, when the ledger is asked
		wantRepairs  []string
		wantVanished []string
	}{
		{name: "recreated within the window: a repair, not vanished",
			events: []event{{deleted: node("a", "1", false, nil)}, {after: 10 * time.Minute, added: node("a", "2", true, nil)}},
			then:   2 * window, wantRepairs: []string{"a"}},
		{name: "NotReady, gone for good: vanished once the window is over",
			events: []event{{deleted: node("b", "1", false, nil)}},
			then:   window + time.Second, wantVanished: []string{"b"}},
		{name: "NotReady, not yet the window's end: nothing yet",
			events: []event{{deleted: node("b", "1", false, nil)}},
			then:   window},
		{name: "Ready when deleted (a scale-down): nothing",
			events: []event{{deleted: node("c", "1", true, nil)}},
			then:   2 * window},
		{name: "cordoned, or tainted by the autoscaler, or in maintenance: removed on purpose, nothing",
			events: []event{{deleted: node("d", "1", false, cordoned)}, {deleted: node("e", "1", false, scaledDown)}, {deleted: node("f", "1", false, draining)}},
			then:   2 * window},
		{name: "created again past the window: a new node, not a repair",
			events: []event{{deleted: node("g", "1", true, nil)}, {after: window + time.Minute, added: node("g", "2", true, nil)}},
			then:   time.Minute},
		{name: "the same object seen again (a relist): nothing",
			events: []event{{deleted: node("h", "1", true, nil)}, {after: time.Minute, added: node("h", "1", true, nil)}},
			then:   time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))
			l := newLedger(window)
			for _, e := range tc.events {
				clk.Step(e.after)
				if e.deleted != nil {
					l.deleted(e.deleted, "pool", clk.Now())
				}
				if e.added != nil {
					l.added(e.added, clk.Now())
				}
			}
			clk.Step(tc.then)
			var repairs, vanished []string
			for _, d := range l.takeRecreated() {
				repairs = append(repairs, d.name)
			}
			for _, d := range l.vanished(clk.Now()) {
				vanished = append(vanished, d.name)
			}
			if d := cmp.Diff(tc.wantRepairs, repairs); d != "" {
				t.Errorf("repairs (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantVanished, vanished); d != "" {
				t.Errorf("vanished (-want +got):\n%s", d)
			}
			if again := l.vanished(clk.Now()); len(again) != 0 || len(l.takeRecreated()) != 0 {
				t.Errorf("counted twice: %v", again)
			}
		})
	}
}

// TestRepairOf: the repair carries every count of the deleted object (the
// agent's and its own repairs), adds one, and is written once.
func TestRepairOf(t *testing.T) {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "old"}}
	repaired := protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	protocol.WriteAgentState(old, protocol.AgentState{Interruptions: protocol.Counts{}.Add(protocol.HostMaintenance, 2), LastRepair: repaired})
	protocol.WriteRepairs(old, protocol.Repairs{RecreatedFrom: "older", Interruptions: protocol.Counts{}.Add(protocol.Repair, 1)})
	l := newLedger(time.Hour)
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	l.deleted(old, "pool", now)
	cur := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "new"}}
	l.added(cur, now.Add(time.Minute))
	pending := l.takeRecreated()
	if len(pending) != 1 {
		t.Fatalf("repairs %v", pending)
	}
	r, ok := repairOf(cur, pending[0])
	want := protocol.Repairs{RecreatedFrom: "old", Interruptions: protocol.Counts{protocol.HostMaintenance.Key(): 2, protocol.Repair.Key(): 2}}
	if d := cmp.Diff(want, r); !ok || d != "" {
		t.Fatalf("repair (-want +got):\n%s", d)
	}
	protocol.WriteRepairs(cur, r)
	if _, again := repairOf(cur, pending[0]); again {
		t.Error("the repair would be written twice")
	}
	if got := protocol.NodeInterruptions(cur); got[protocol.Repair.Key()] != 2 || got[protocol.HostMaintenance.Key()] != 2 {
		t.Errorf("the new Node counts %v", got)
	}
	// The agent's last-fault-repair is its node's word: not laundered
	// into the aggregator's record.
	if got := fleet.NodeOf(cur, protocol.Grouping{}).LastRepair; got.Outcome != "" {
		t.Errorf("the new Node's last repair %+v; want none (the agent's %+v not carried)", got, repaired)
	}
}

// TestRepairOfRecordsItsOwn: the last repair the aggregator records on a
// Node created again is what it knows itself: a repair it approved ends
// when it saw the Node deleted; else its own earlier record; never the
// last-fault-repair the node's agent wrote, which a hostile agent rewrites
// to hold its pool's repairRate.
func TestRepairOfRecordsItsOwn(t *testing.T) {
	deletedAt := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	agentSays := protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: deletedAt.Add(-time.Second)}
	earlier := protocol.LastFaultRepair{Outcome: protocol.RepairFailed, Ended: deletedAt.Add(-24 * time.Hour)}
	for _, tc := range []struct {
		name     string
		approved bool
		own      *protocol.LastFaultRepair
		want     *protocol.LastFaultRepair
	}{
		{"only the agent's word", false, nil, nil},
		{"its approval on the deleted Node", true, nil, &protocol.LastFaultRepair{Outcome: protocol.RepairDone, Ended: deletedAt}},
		{"its own earlier record", false, &earlier, &earlier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "old"}}
			protocol.WriteAgentState(old, protocol.AgentState{LastRepair: agentSays})
			if tc.approved {
				protocol.WriteRepairApproval(old, protocol.RepairApproval{Behavior: protocol.FaultBehaviors[0], Source: protocol.FaultSourcePerson, Approved: deletedAt.Add(-time.Hour), DrainTimeout: protocol.Duration(time.Hour)})
			}
			if tc.own != nil {
				protocol.WriteRepairs(old, protocol.Repairs{RecreatedFrom: "older", LastRepair: tc.own})
			}
			l := newLedger(time.Hour)
			l.deleted(old, "pool", deletedAt)
			cur := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "new"}}
			l.added(cur, deletedAt.Add(time.Minute))
			pending := l.takeRecreated()
			if len(pending) != 1 {
				t.Fatalf("repairs %v", pending)
			}
			r, _ := repairOf(cur, pending[0])
			if d := cmp.Diff(tc.want, r.LastRepair); d != "" {
				t.Errorf("recorded last repair (-want +got):\n%s", d)
			}
		})
	}
}

// TestBegun: the pool counts what the node's agent counts, once, by its
// reason; a manual or opportunistic maintenance under its own reason, when
// the agent counts it; a slice's drain never; a count that a hostile or
// broken agent wrote (a jump, a huge value, an unknown key) not at all.
func TestBegun(t *testing.T) {
	at := func(phase protocol.Phase, reason protocol.Reason, counts protocol.Counts, opportunistic bool) *corev1.Node {
		n := &corev1.Node{}
		protocol.WriteAgentState(n, protocol.AgentState{Phase: phase, Reason: reason, Started: time.Unix(1, 0), Interruptions: counts})
		if opportunistic {
			protocol.WriteTrigger(n, protocol.MaintenanceState{OpportunisticTriggered: true})
		}
		return n
	}
	none := protocol.Counts{}
	host := none.Add(protocol.HostMaintenance, 1)
	idle, draining, terminating := protocol.PhaseIdle, protocol.PhaseDraining, protocol.PhaseTerminating
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Node
		want     []protocol.Interruption
	}{
		{"host maintenance starts", at(idle, "", none, false), at(draining, protocol.ReasonHostMaintenance, host, false), []protocol.Interruption{protocol.HostMaintenance}},
		{"preemption starts", at(idle, "", none, false), at(draining, protocol.ReasonPreemption, none.Add(protocol.Preemption, 1), false), []protocol.Interruption{protocol.Preemption}},
		{"the same maintenance written again", at(draining, protocol.ReasonHostMaintenance, host, false), at(terminating, protocol.ReasonHostMaintenance, host, false), nil},
		{"preempted during a manual drain", at(draining, protocol.ReasonManual, none, false), at(draining, protocol.ReasonPreemption, none.Add(protocol.Preemption, 1), false), []protocol.Interruption{protocol.Preemption}},
		{"a manual drain begins: not yet", at(idle, "", none, false), at(draining, protocol.ReasonManual, none, false), nil},
		{"Compute Engine begins a manual maintenance", at(terminating, protocol.ReasonManual, none, false), at(terminating, protocol.ReasonManual, host, false), []protocol.Interruption{protocol.ManualMaintenance}},
		{"the VM comes back from an opportunistic one not seen begin", at(terminating, protocol.ReasonManual, none, true), at(idle, "", host, false), []protocol.Interruption{protocol.OpportunisticMaintenance}},
		{"TERMINATE takes a manual drain over: a host maintenance", at(draining, protocol.ReasonManual, none, false), at(draining, protocol.ReasonHostMaintenance, host, false), []protocol.Interruption{protocol.HostMaintenance}},
		{"a slice's drain", at(idle, "", none, false), at(draining, protocol.ReasonSlice, none, false), nil},
		{"an unannounced reboot", at(idle, "", none, false), at(idle, "", none.Add(protocol.UnannouncedReboot, 1), false), []protocol.Interruption{protocol.UnannouncedReboot}},
		{"maintenance over", at(terminating, protocol.ReasonHostMaintenance, host, false), at(idle, "", host, false), nil},
		{"a missed update: two at once", at(idle, "", none, false), at(idle, "", none.Add(protocol.UnannouncedReboot, 2), false), []protocol.Interruption{protocol.UnannouncedReboot, protocol.UnannouncedReboot}},
		{"a count that jumps is not believed", at(idle, "", none, false), at(idle, "", none.Add(protocol.UnannouncedReboot, maxCountStep+1), false), nil},
		{"a count past MaxCount is not read", at(idle, "", none, false), at(idle, "", none.Add(protocol.Preemption, protocol.MaxCount+1), false), nil},
		{"a key of no interruption is not read", at(idle, "", none, false), at(idle, "", protocol.Counts{"MaintenanceEvent/Invented": 1}, false), nil},
	} {
		if got := begun(tc.old, tc.cur); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestClaimWindowBoundsANodePerHour: one node adds at most
// MaxClaimsPerHour interruptions to its pool's counters in any hour; the
// hour slides; other nodes have their own.
func TestClaimWindowBoundsANodePerHour(t *testing.T) {
	w := claimWindow{}
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		node        string
		n           int
		at          time.Duration
		wantFits    int
		whatHappens string
	}{
		{"a", 1, 0, 1, "one interruption"},
		{"a", 2, 10 * time.Minute, 2, "two at once (a missed update)"},
		{"a", 3, 20 * time.Minute, MaxClaimsPerHour - 3, "past the bound: the rest refused"},
		{"a", 1, 30 * time.Minute, 0, "still within the hour"},
		{"b", 1, 30 * time.Minute, 1, "another node has its own"},
		{"a", 1, 61 * time.Minute, 1, "the first has left the hour"},
		{"a", 8, 3 * time.Hour, MaxClaimsPerHour, "a jump hours later: the bound"},
	} {
		if got := w.admit(tc.node, tc.n, t0.Add(tc.at)); got != tc.wantFits {
			t.Errorf("%s: %d of %d fit, want %d", tc.whatHappens, got, tc.n, tc.wantFits)
		}
	}
	if len(w["a"]) != MaxClaimsPerHour {
		t.Errorf("remembered %v for a, want the last hour's %d", w["a"], MaxClaimsPerHour)
	}
}

// TestLedgerKeepsApprovals: the repairs the aggregator approved of a Node
// deleted (its record on the Node, and an approval still on it) are kept
// by name past the recreate window, whether the Node comes back or not,
// until no pool's repairRate counts them; a Node created again within the
// window carries them on (repairOf).
func TestLedgerKeepsApprovals(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "old"}}
	protocol.WriteRepairs(old, protocol.Repairs{Approved: map[string]time.Time{"a3": at.Add(-time.Hour)}})
	protocol.WriteRepairApproval(old, protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourcePerson, Approved: at.Add(-time.Minute), DrainTimeout: protocol.Duration(time.Hour)})
	l := newLedger(time.Hour)
	l.deleted(old, "b", at)
	want := map[string]time.Time{"a3": at.Add(-time.Hour), "b": at.Add(-time.Minute)}
	cur := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "new"}}
	l.added(cur, at.Add(time.Minute))
	pending := l.takeRecreated()
	if len(pending) != 1 {
		t.Fatalf("repairs %v", pending)
	}
	// An approval of the new Node's, made before the repair was written,
	// is kept with them.
	protocol.WriteRepairs(cur, protocol.Repairs{Approved: map[string]time.Time{"c": at.Add(2 * time.Minute)}})
	r, _ := repairOf(cur, pending[0])
	if d := cmp.Diff(map[string]time.Time{"a3": at.Add(-time.Hour), "b": at.Add(-time.Minute), "c": at.Add(2 * time.Minute)}, r.Approved); d != "" {
		t.Errorf("approvals carried onto the new Node (-want +got):\n%s", d)
	}
	week := func(string) time.Duration { return 168 * time.Hour }
	if d := cmp.Diff(fleet.Kept{"a": want}, l.kept(at.Add(2*time.Hour), week)); d != "" {
		t.Errorf("kept past the recreate window (-want +got):\n%s", d)
	}
	if got := l.kept(at.Add(2*time.Hour), func(string) time.Duration { return 0 }); len(got) != 0 || len(l.approved) != 0 {
		t.Errorf("kept %v (%d held) with no repairRate; want none", got, len(l.approved))
	}
	l.deleted(old, "b", at)
	if got := l.kept(at.Add(169*time.Hour), week); len(got) != 0 || len(l.approved) != 0 {
		t.Errorf("kept %v (%d held) past the window; want none", got, len(l.approved))
	}
}

// TestNodeDeletedKeepsItsClaims: a Node deleted (and created again by its
// kubelet) keeps its claims of the hour by name: the bound is not lifted;
// they go once the hour is over (prune), so that memory follows the nodes
// that claimed within it.
func TestNodeDeletedKeepsItsClaims(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	a := &Aggregator{opts: Options{Clock: clk, PoolLabel: protocol.LabelNodePool}, ledger: newLedger(time.Hour), claims: claimWindow{}}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hostile", UID: "1"}}
	if got := a.claims.admit(n.Name, MaxClaimsPerHour, clk.Now()); got != MaxClaimsPerHour {
		t.Fatalf("%d claims fit, want %d", got, MaxClaimsPerHour)
	}
	a.nodeDeleted(n)
	a.nodeAdded(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hostile", UID: "2"}})
	clk.Step(time.Minute)
	if got := a.claims.admit(n.Name, 1, clk.Now()); got != 0 {
		t.Errorf("%d claims fit after the Node was deleted and created again, want none", got)
	}
	clk.Step(59 * time.Minute)
	a.claims.prune(clk.Now())
	if len(a.claims) != 0 {
		t.Errorf("claims held past the hour: %v", a.claims)
	}
}
