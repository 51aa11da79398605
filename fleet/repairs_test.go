package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestApprovalLapsesUnasked: an approved repair whose agent asks for no
// report holds its pool's place until its drain timeout and the grace
// after the approval, and no longer: the plan names it to be withdrawn,
// and the pool's other faulty node is approved. One whose report was
// asked for and not yet answered holds on; one GKE's flow took on holds
// for VouchedFor; a report the relay accepted holds until its answer's
// bound. An ask never answered (an answer the API server refuses to
// write) holds it AnswerWithin longer, no more.
func TestApprovalLapsesUnasked(t *testing.T) {
	approved := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	const grace = 10 * time.Minute
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"1\"\n    drainTimeout: 30m\n")
	if err != nil {
		t.Fatal(err)
	}
	waiting := Node{Name: "waiting", Pool: "a3", ReportFaulty: protocol.BehaviorChipError, ReportFaultySet: true}
	approval := &protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourceCondition,
		Approved: approved, DrainTimeout: protocol.Duration(30 * time.Minute), Request: "r-1"}
	held := Node{Name: "held", Pool: "a3", FaultTaint: true, Repair: approval, Approved: map[string]time.Time{"a3": approved}}
	asked := held
	asked.RepairAsked = true
	gke := held
	gke.GKEFlow = true
	reported := Node{Name: "held", Pool: "a3", FaultTaint: true, ReportUntil: approved.Add(2 * time.Hour), Approved: map[string]time.Time{"a3": approved}}
	for _, tc := range []struct {
		name    string
		holder  Node
		at      time.Duration // after the approval
		holds   bool
		lapsed  []string
		waiting FaultReason
	}{
		{name: "within the drain timeout and grace", holder: held, at: 39 * time.Minute, holds: true, waiting: FaultMaxInRepair},
		{name: "past them, unasked", holder: held, at: 40 * time.Minute, lapsed: []string{"held"}, waiting: FaultApproved},
		{name: "asked, not answered", holder: asked, at: 54 * time.Minute, holds: true, waiting: FaultMaxInRepair},
		{name: "asked, never answered", holder: asked, at: 55 * time.Minute, lapsed: []string{"held"}, waiting: FaultApproved},
		{name: "taken on by GKE's flow", holder: gke, at: 5 * time.Hour, holds: true, waiting: FaultMaxInRepair},
		{name: "GKE's flow past VouchedFor", holder: gke, at: protocol.VouchedFor, lapsed: []string{"held"}, waiting: FaultApproved},
		{name: "report accepted", holder: reported, at: time.Hour, holds: true, waiting: FaultMaxInRepair},
		{name: "report accepted, past its bound", holder: reported, at: 2 * time.Hour, waiting: FaultApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := approved.Add(tc.at)
			holder := tc.holder
			holder.ExpireRepair(now, grace)
			if holder.InRepair() != tc.holds {
				t.Errorf("in repair %t, want %t", holder.InRepair(), tc.holds)
			}
			plan := DecideFaults(now, cfg, []Node{holder, waiting})
			var lapsed []string
			for _, f := range plan.Lapsed {
				lapsed = append(lapsed, f.Node)
				if f.Reason != FaultLapsed || f.Message == "" {
					t.Errorf("lapsed %+v: want reason %s and a message", f, FaultLapsed)
				}
			}
			if d := cmp.Diff(tc.lapsed, lapsed); d != "" {
				t.Errorf("lapsed (-want +got):\n%s", d)
			}
			i := slices.IndexFunc(plan.Faults, func(f Fault) bool { return f.Node == "waiting" })
			if i < 0 || plan.Faults[i].Reason != tc.waiting {
				t.Errorf("faults %+v: want the waiting node %s", plan.Faults, tc.waiting)
			}
		})
	}
}

// TestRepairOnAConditionOncePerCooldown: a node whose repair the
// aggregator approved within the pool's cool-down is not approved again on
// a detector's condition (which may be its own word, however its repair
// ended), only on a person's request; past the cool-down it is.
func TestRepairOnAConditionOncePerCooldown(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    cooldown: 6h\n    conditions:\n    - type: maintenance-handler.io/DeviceUnhealthy\n      for: 1m\n      behavior: UNRECOVERABLE_GPU_ERROR\n")
	if err != nil {
		t.Fatal(err)
	}
	cond := []Condition{{Type: "maintenance-handler.io/DeviceUnhealthy", Status: "True", Since: now.Add(-time.Hour), Written: now}}
	for _, tc := range []struct {
		name     string
		approved time.Duration // ago
		person   bool
		want     FaultReason
	}{
		{name: "approved an hour ago", approved: time.Hour, want: FaultCoolingDown},
		{name: "approved an hour ago, a person asks", approved: time.Hour, person: true, want: FaultApproved},
		{name: "approved seven hours ago", approved: 7 * time.Hour, want: FaultApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := Node{Name: "n", Pool: "a3", FaultTaint: true, Conditions: cond, Approved: map[string]time.Time{"a3": now.Add(-tc.approved)}}
			if tc.person {
				n.ReportFaulty, n.ReportFaultySet = protocol.BehaviorChipError, true
			}
			plan := DecideFaults(now, cfg, []Node{n})
			if len(plan.Faults) != 1 || plan.Faults[0].Reason != tc.want {
				t.Fatalf("faults %+v, want %s", plan.Faults, tc.want)
			}
		})
	}
}

// TestQueueLeastRecentlyRepairedFirst: of a pool's faulty nodes, one whose
// repair the aggregator approved recently waits behind one never
// repaired, whatever their faults' ages and names; then the oldest fault
// goes first.
func TestQueueLeastRecentlyRepairedFirst(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"1\"\n    cooldown: 1h\n    conditions:\n    - type: GPUUnhealthy\n      for: 1m\n      behavior: UNRECOVERABLE_GPU_ERROR\n")
	if err != nil {
		t.Fatal(err)
	}
	bad := func(name string, since time.Duration, approved map[string]time.Time) Node {
		return Node{Name: name, Pool: "a3", Approved: approved,
			Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-since), Written: now}}}
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  string
	}{
		{name: "the oldest fault", nodes: []Node{bad("a", 5*time.Minute, nil), bad("b", time.Hour, nil)}, want: "b"},
		{name: "never repaired before one repaired a day ago", nodes: []Node{bad("a", 2*time.Hour, map[string]time.Time{"a3": now.Add(-24 * time.Hour)}), bad("b", 5*time.Minute, nil)}, want: "b"},
		{name: "repaired longer ago first", nodes: []Node{bad("a", time.Hour, map[string]time.Time{"a3": now.Add(-2 * time.Hour)}), bad("b", time.Hour, map[string]time.Time{"n2": now.Add(-48 * time.Hour)})}, want: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := DecideFaults(now, cfg, tc.nodes)
			var approved []string
			for _, f := range plan.Faults {
				if f.Reason == FaultApproved {
					approved = append(approved, f.Node)
				}
			}
			if d := cmp.Diff([]string{tc.want}, approved); d != "" {
				t.Errorf("approved (-want +got):\n%s\nfaults %+v", d, plan.Faults)
			}
		})
	}
}

// TestRepairPlaceFromWhatTheNodeCannotWrite: read from the Node object, a
// faulty-tainted node whose agent says a repair is under way holds a
// place only where the relay accepted its report in the present boot,
// until the answer's bound or ReportReturn after the report's operation
// ended; an approval asked for holds until answered (AnswerWithin past
// the ask's deadline at most), and one GKE's flow
// took on (a new operation label) for VouchedFor.
func TestRepairPlaceFromWhatTheNodeCannotWrite(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	repairing := protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonFault, Started: now, Deadline: now.Add(time.Hour), RequestID: "req-1"}
	approval := protocol.RepairApproval{Behavior: protocol.BehaviorChipError, Source: protocol.FaultSourceCondition, Approved: now,
		DrainTimeout: protocol.Duration(30 * time.Minute), Request: "req-1", GKEOperationBefore: "op-old"}
	accepted := protocol.ComputeAnswer{ID: "req-1", Operation: "op-1", Boot: "boot-1", Until: now.Add(protocol.VouchedFor)}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   time.Time // RepairPlaceUntil; zero: none, or not before an answer
		in     bool
	}{
		{name: "its own word alone", change: func(*corev1.Node) {}},
		{name: "a report accepted in this boot", in: true, want: accepted.Until, change: func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(accepted)
		}},
		{name: "a report accepted, its operation ended", in: true, want: now.Add(time.Hour + ReportReturn), change: func(n *corev1.Node) {
			a := accepted
			a.Done, a.Ended = true, now.Add(time.Hour)
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(a)
		}},
		{name: "a report accepted in another boot", change: func(n *corev1.Node) {
			a := accepted
			a.Boot = "boot-0"
			n.Annotations[protocol.AnnotationComputeAnswer] = protocol.Encode(a)
		}},
		{name: "approved, not asked", in: true, want: now.Add(30*time.Minute + time.Minute), change: func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, approval)
		}},
		{name: "approved and asked, not answered", in: true, want: now.Add(30*time.Minute + time.Minute + AnswerWithin), change: func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, approval)
			n.Annotations[protocol.AnnotationComputeCall] = protocol.Encode(protocol.ComputeCall{ID: "req-1", Method: protocol.CallReportHostAsFaulty})
		}},
		{name: "approved, GKE's last operation still on", in: true, want: now.Add(30*time.Minute + time.Minute), change: func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, approval)
			n.Labels[protocol.LabelReportAndReplaceOperation] = "op-old"
		}},
		{name: "approved, taken on by GKE's flow", in: true, want: now.Add(protocol.VouchedFor), change: func(n *corev1.Node) {
			protocol.WriteRepairApproval(n, approval)
			n.Labels[protocol.LabelReportAndReplaceOperation] = "op-new"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{protocol.LabelNodePool: "a3"}, Annotations: map[string]string{}},
				Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: protocol.TaintFaulty, Effect: corev1.TaintEffectNoSchedule}}},
				Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}}
			protocol.WriteAgentState(n, repairing)
			tc.change(n)
			v := NodeOf(n, protocol.Grouping{PoolLabel: protocol.LabelNodePool})
			if v.InRepair() != tc.in {
				t.Errorf("in repair %t, want %t", v.InRepair(), tc.in)
			}
			if got := v.RepairPlaceUntil(time.Minute); !got.Equal(tc.want) {
				t.Errorf("its place holds until %s, want %s", got, tc.want)
			}
		})
	}
}

// TestLastApprovedFromEveryRecord: the cool-down after the aggregator's
// last approval counts an approval kept of the Node's deleted object, and
// one whose write the API server refused, as it counts its record on the
// Node; a refused one fills no place of the pool's repairRate.
func TestLastApprovedFromEveryRecord(t *testing.T) {
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	cfg, err := policy.ParseConfig("cluster:\n  faults:\n    maxInRepair: \"5\"\n    repairRate: 1/168h\n    cooldown: 6h\n    conditions:\n    - type: GPUUnhealthy\n      for: 1m\n      behavior: UNRECOVERABLE_GPU_ERROR\n")
	if err != nil {
		t.Fatal(err)
	}
	bad := func(name string) *Node {
		return &Node{Name: name, Pool: "a3", FaultTaint: true,
			Conditions: []Condition{{Type: "GPUUnhealthy", Status: "True", Since: now.Add(-time.Hour), Written: now}}}
	}
	back, refused, honest := bad("back"), bad("refused"), bad("honest")
	refused.ApprovalRefused = now.Add(-time.Hour)
	kept := Kept{"back": {"a3": now.Add(-100 * time.Minute)}}
	got := map[string]FaultReason{}
	plan := decideFaults(now, cfg, []string{"a3"}, func(string) []*Node { return []*Node{back, refused, honest} }, kept)
	for _, f := range plan.Faults {
		got[f.Node] = f.Reason
	}
	// back's kept approval fills the pool's one repair a week: honest
	// waits for the rate, not for a refused approval.
	want := map[string]FaultReason{"back": FaultCoolingDown, "refused": FaultCoolingDown, "honest": FaultRateLimited}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	plan = decideFaults(now, cfg, []string{"a3"}, func(string) []*Node { return []*Node{refused, honest} }, nil)
	if i := slices.IndexFunc(plan.Faults, func(f Fault) bool { return f.Node == "honest" }); i < 0 || plan.Faults[i].Reason != FaultApproved {
		t.Errorf("faults %+v: want honest approved (a refused approval fills no repairRate)", plan.Faults)
	}
}
