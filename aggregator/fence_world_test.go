package aggregator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDeposedLeadersLateWritesCannotExceedTheCap: a pool of 20 idle nodes
// with max-unavailable=1. Leader A decided to trigger fence-00, claimed it
// and paused before its write; B leads now. B counts A's claim and
// triggers nothing; A's late write lands (the node is as A saw it), and
// still one node is in voluntary maintenance; A's next claim, conditional
// on the claims it read before B's, is fenced.
func TestDeposedLeadersLateWritesCannotExceedTheCap(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	_, leases := clients(t)
	names := idlePool(t, "fenced", "fence", 20, "node-idle-time=600s,min-nodes=0,window=2419200s,max-unavailable=1")
	claimsLease := aggregator.ClaimsLeaseName(shippedLease)

	// A, leading: it decides on fence-00 as it is now, and claims it.
	seenByA, versionA := claimAsLeader(t, ctx, leases, ns, claimsLease, "fence-00")

	// A pauses; B leads.
	r := startAggregator(t, ns, "")
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonMaxVoluntary))) == 19, nil
	})
	if err != nil {
		t.Fatalf("decisions{skipped,max_voluntary} = %v, want 19 (A's claim counted)", testutil.ToFloat64(r.metrics.Decisions.WithLabelValues("skipped", string(fleet.ReasonMaxVoluntary))))
	}
	waitPasses(t, r.agg, 3)
	if got := countTriggered(t, names); len(got) != 0 {
		t.Fatalf("B triggered %v while A's claim on fence-00 could still land", got)
	}

	// A wakes and writes its trigger, conditional on what it saw: it lands.
	late := seenByA.DeepCopy()
	protocol.WriteTrigger(late, protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredBy: "A"})
	if _, err := world.Client.CoreV1().Nodes().Update(ctx, late, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("A's late write: %v", err)
	}

	// B resolves the claim (the Node now shows the maintenance) and drops
	// it: the claims change, and A's next claim is fenced.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		v, nodes, err := aggregator.ReadClaims(ctx, leases, ns, claimsLease)
		return err == nil && v != versionA && len(nodes) == 0, nil
	})
	if err != nil {
		t.Fatalf("B never dropped the resolved claim: %v", err)
	}
	seen01, err := world.Client.CoreV1().Nodes().Get(ctx, "fence-01", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = aggregator.WriteClaims(ctx, leases, ns, claimsLease, versionA, map[string]string{"fence-00": seenByA.ResourceVersion, "fence-01": seen01.ResourceVersion})
	if !errors.Is(err, aggregator.ErrFenced) {
		t.Errorf("A's claim after B's: %v, want ErrFenced", err)
	}
	waitPasses(t, r.agg, 3)
	if got := countTriggered(t, names); len(got) != 1 || got[0] != "fence-00" {
		t.Errorf("triggered %v, want only A's fence-00 (max-unavailable=1)", got)
	}
}

// countTriggered lists the nodes among names carrying an opportunistic
// trigger.
func countTriggered(t *testing.T, names []string) []string {
	t.Helper()
	return nodesWhere(t, names, triggered)
}

// nodesWhere lists the nodes among names for which is holds now.
func nodesWhere(t *testing.T, names []string, is func(*corev1.Node) bool) []string {
	t.Helper()
	var out []string
	for _, name := range names {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if is(n) {
			out = append(out, name)
		}
	}
	return out
}

// TestNewLeaderFencesBeforeItsFirstPass: leader A read the claims and
// decided to trigger fence2-00, then paused before claiming; meanwhile
// fence2-01 went into voluntary maintenance, so B, leading now, has
// nothing to trigger (max-unavailable=1). B fenced the claims when it took
// over, so A's late claim, conditional on what it read, fails, and one
// node stays in voluntary maintenance. (Before, B never wrote the claims,
// A's claim succeeded and its trigger landed: two nodes with a cap of 1.)
func TestNewLeaderFencesBeforeItsFirstPass(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	_, leases := clients(t)
	names := idlePool(t, "fenced2", "fence2", 4, "node-idle-time=600s,min-nodes=0,window=2419200s,max-unavailable=1")
	claimsLease := aggregator.ClaimsLeaseName(shippedLease)

	// A decides on fence2-00 from the claims and the node as they are.
	seenByA, err := world.Client.CoreV1().Nodes().Get(ctx, "fence2-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versionA, _, err := aggregator.ReadClaims(ctx, leases, ns, claimsLease)
	if err != nil {
		t.Fatal(err)
	}
	// fence2-01 goes into voluntary maintenance (a trigger that landed
	// and was resolved); B takes over and finds the cap full.
	busy, err := world.Client.CoreV1().Nodes().Get(ctx, "fence2-01", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteTrigger(busy, protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredBy: "earlier"})
	if _, err := world.Client.CoreV1().Nodes().Update(ctx, busy, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := startAggregator(t, ns, "")
	waitPasses(t, r.agg, 2)
	if got := countTriggered(t, names); len(got) != 1 {
		t.Fatalf("B triggered: %v, want only fence2-01 (the cap is full)", got)
	}

	// A wakes: its claim, conditional on the claims it read, fails.
	if _, err := aggregator.WriteClaims(ctx, leases, ns, claimsLease, versionA, map[string]string{"fence2-00": seenByA.ResourceVersion}); !errors.Is(err, aggregator.ErrFenced) {
		t.Fatalf("A's late claim: %v, want ErrFenced (B fenced when it took over)", err)
	}
}

// TestUnansweredTriggerFreesItsSlot: an opportunistic trigger written 11
// minutes ago that no agent answered (the agent is down) held the pool's
// only place under max-unavailable=1 for ever. The aggregator withdraws it
// with a Warning Event and, the place free, triggers another node (not the
// silent one again: it cools down as after a failure).
func TestUnansweredTriggerFreesItsSlot(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	names := idlePool(t, "unanswered", "unans", 3, "node-idle-time=600s,min-nodes=0,window=2419200s,max-unavailable=1")
	stuck, err := world.Client.CoreV1().Nodes().Get(ctx, "unans-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	protocol.WriteTrigger(stuck, protocol.MaintenanceState{OpportunisticTriggered: true, TriggeredBy: "earlier",
		TriggeredAt: time.Now().Add(-11 * time.Minute).UTC().Format(time.RFC3339), ScheduledTime: protocol.ReadAgentState(stuck).ScheduledTime})
	if _, err := world.Client.CoreV1().Nodes().Update(ctx, stuck, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	startAggregator(t, ns, "")
	world.WaitEvent(t, "unans-00", protocol.EventTriggerWithdrawn, "No agent answered")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got := countTriggered(t, names)
		return len(got) == 1 && got[0] != "unans-00", nil
	})
	if err != nil {
		t.Errorf("triggered %v, want one node other than unans-00 (its place freed)", countTriggered(t, names))
	}
}

// TestDeposedLeadersLateApprovalCannotExceedTheRepairCap: three nodes a
// person reported faulty, tainted faulty by an earlier pass, maxInRepair 1. Leader A
// decided to approve ff-02's repair, claimed it and paused before its
// write; B leads now, counts A's claim and approves nothing; A's late
// approval lands, and still one node is in repair. (Before approvals were
// claimed, B approved ff-00 and A's write landed beside it: two.) Where
// another writer moved ff-02 past the version A claimed, A's write can no
// longer land and B may approve another: A's write then fails, and still
// one node is in repair.
func TestDeposedLeadersLateApprovalCannotExceedTheRepairCap(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	_, leases := clients(t)
	names := []string{"ff-00", "ff-01", "ff-02"}
	for _, name := range names {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "ff"})
		// A person asked for its repair (a label: kwok, which answers a
		// status write with its own, leaves it alone, so the Node stays
		// at the version A claims).
		write(t, name, func(n *corev1.Node) {
			n.Labels[protocol.LabelReportFaulty] = protocol.BehaviorChipError
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: protocol.TaintFaulty, Effect: corev1.TaintEffectNoSchedule})
		})
	}
	configMap(t, ns, fmt.Sprintf(faultPolicy, "ff", "0s"))
	claimsLease := aggregator.ClaimsLeaseName(shippedLease)

	// A, leading: it approves ff-02's repair as ff-02 is now, and claims it.
	seenByA, _ := claimAsLeader(t, ctx, leases, ns, claimsLease, "ff-02")

	// A pauses; B leads: the two others wait for the cap, A's claim counted.
	r := startAggregator(t, ns, "maintenance-handler")
	waiting := r.metrics.FaultDecisions.WithLabelValues("ff", string(fleet.FaultMaxInRepair))
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(waiting) == 2, nil
	})
	if err != nil {
		t.Fatalf("fault_decisions{ff,max_in_repair} = %v, want 2 (A's claim counted)", testutil.ToFloat64(waiting))
	}
	waitPasses(t, r.agg, 3)
	late := seenByA.DeepCopy()
	protocol.WriteRepairApproval(late, protocol.RepairApproval{Behavior: protocol.BehaviorUnrecoverableGPUError, Source: protocol.FaultSourceCondition,
		Approved: time.Now(), DrainTimeout: protocol.Duration(time.Minute)})
	if got := approvedOf(t, names); len(got) != 0 {
		// Only if ff-02 moved past the version A claimed (another
		// writer: kwok heart-beats its nodes) can A's write no longer
		// land, and B rightly no longer counts it: then A's write must
		// fail, and the cap hold.
		cur, err := world.Client.CoreV1().Nodes().Get(ctx, "ff-02", metav1.GetOptions{})
		if err != nil || cur.ResourceVersion == seenByA.ResourceVersion {
			t.Fatalf("B approved %v while A's claim on ff-02 could still land", got)
		}
		t.Logf("ff-02 moved past A's claim (version %s, now %s), and B approved %v", seenByA.ResourceVersion, cur.ResourceVersion, got)
		if _, err := world.Client.CoreV1().Nodes().Update(ctx, late, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("A's late write on a node that moved: %v, want a conflict", err)
		}
		if got := approvedOf(t, names); len(got) != 1 {
			t.Errorf("approved %v, want one (maxInRepair 1)", got)
		}
		return
	}

	// A wakes and writes its approval, conditional on what it saw: it lands.
	if _, err := world.Client.CoreV1().Nodes().Update(ctx, late, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("A's late write: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, nodes, err := aggregator.ReadClaims(ctx, leases, ns, claimsLease)
		return err == nil && len(nodes) == 0, nil
	})
	if err != nil {
		t.Fatalf("B never dropped the resolved claim: %v", err)
	}
	waitPasses(t, r.agg, 3)
	if got := approvedOf(t, names); len(got) != 1 || got[0] != "ff-02" {
		t.Errorf("approved %v, want only A's ff-02 (maxInRepair 1)", got)
	}
}

// approvedOf lists the nodes among names whose repair is approved.
func approvedOf(t *testing.T, names []string) []string {
	t.Helper()
	return nodesWhere(t, names, func(n *corev1.Node) bool { _, ok := protocol.ReadRepairApproval(n); return ok })
}

// claimAsLeader plays a leader that decided on node as it is now and
// claimed it: the node it saw, and the claims' version after its claim.
func claimAsLeader(t *testing.T, ctx context.Context, leases coordinationv1client.LeasesGetter, ns, claimsLease, node string) (*corev1.Node, string) {
	t.Helper()
	seen, err := world.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	version, _, err := aggregator.ReadClaims(ctx, leases, ns, claimsLease)
	if err != nil {
		t.Fatal(err)
	}
	version, err = aggregator.WriteClaims(ctx, leases, ns, claimsLease, version, map[string]string{node: seen.ResourceVersion})
	if err != nil {
		t.Fatalf("the leader's claim: %v", err)
	}
	return seen, version
}

// TestTenThousandClaimsLand: a pass that claims 10,000 nodes writes its
// claims on the claims Lease through the API server (whose limit on an
// object's annotations, 256 KiB, JSON claims overflow at about 4,500), and
// the next pass reads them back as written.
func TestTenThousandClaimsLand(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, time.Minute)
	ns := world.Namespace(t)
	_, leases := clients(t)
	claimed := aggregator.GKEClaims(10000)
	claimsLease := aggregator.ClaimsLeaseName(shippedLease)
	version, err := aggregator.WriteClaims(ctx, leases, ns, claimsLease, "", claimed)
	if err != nil {
		t.Fatalf("writing 10,000 claims: %v", err)
	}
	got, nodes, err := aggregator.ReadClaims(ctx, leases, ns, claimsLease)
	if err != nil || got != version || !maps.Equal(nodes, claimed) {
		t.Errorf("read back version %s (%v) with %d claims; want version %s with the %d written", got, err, len(nodes), version, len(claimed))
	}
}
