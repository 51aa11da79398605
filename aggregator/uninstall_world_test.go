package aggregator_test

import (
	"context"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/fleet"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestUninstallLeavesOnlyMaintenanceUnderWay: real agents wrote their
// keys; then they are gone and the uninstall runs. A node with a pending
// notice loses every key the agent wrote (labels, annotations, its node
// conditions), a node whose notice GKE wrote keeps that notice and loses
// the aggregator's opportunistic trigger, and a node drained for host
// maintenance keeps everything, with a Warning Event. The aggregator's
// Leases are gone.
func TestUninstallLeavesOnlyMaintenanceUnderWay(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	f := fleet.ForTest(t, world)
	ns := world.Namespace(t)
	nodes := world.Client.CoreV1().Nodes()
	pending, err := f.Add(ctx, testworld.NodeSpec{Name: "un-pending", Pool: "un"}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	drained, err := f.Add(ctx, testworld.NodeSpec{Name: "un-drained", Pool: "un"}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := world.AddNode(ctx, testworld.NodeSpec{Name: "un-gke", Pool: "un"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"un-pending", "un-drained", "un-gke"} {
		t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	pending.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(48*time.Hour), time.Hour))
	world.WaitNode(t, pending.Name, "the notice mirrored, and MaintenancePlanned", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" && slices.Contains(protocol.ForgetConditions(n), protocol.ConditionMaintenancePlanned)
	})
	drained.Emu.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE")
	world.WaitNode(t, drained.Name, "terminating", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, "un-gke", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[protocol.LabelScheduledMaintenanceTime] = "1796151600"
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = "written by GKE"
		protocol.WriteTrigger(n, protocol.MaintenanceState{OpportunisticTriggered: true, ScheduledTime: "1796151600"})
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range f.VMs {
		if err := v.Agent.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"lease", aggregator.ClaimsLeaseName("lease")} {
		if _, err := world.Client.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := nodes.Get(ctx, drained.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	c, l := clients(t)
	done, err := aggregator.Uninstall(ctx, c.Client, l, clock.RealClock{}, ns, "lease", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(done.Cleaned, "un-pending") || !slices.Contains(done.Cleaned, "un-gke") || !slices.Equal(done.InMaintenance, []string{"un-drained"}) {
		t.Errorf("Uninstall: %+v; want un-pending and un-gke cleaned, un-drained left", done)
	}
	n, err := nodes.Get(ctx, "un-pending", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := ours(n); len(left) > 0 {
		t.Errorf("un-pending keeps %v", left)
	}
	n, err = nodes.Get(ctx, "un-gke", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := ours(n); len(left) != 2 || n.Annotations[protocol.AnnotationUpcomingMaintenance] != "written by GKE" || n.Labels[protocol.LabelPerformMaintenance] != "" {
		t.Errorf("un-gke keeps %v, trigger %q; want GKE's notice only", left, n.Labels[protocol.LabelPerformMaintenance])
	}
	after, err := nodes.Get(ctx, drained.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the uninstall could have changed: its labels, annotations,
	// taints, cordon and conditions of ours (kwok's heartbeats change the
	// rest of its status).
	if !maps.Equal(after.Labels, before.Labels) || !maps.Equal(after.Annotations, before.Annotations) || !reflect.DeepEqual(after.Spec, before.Spec) ||
		!slices.Equal(protocol.ForgetConditions(after), protocol.ForgetConditions(before)) || !after.Spec.Unschedulable || !protocol.HasTaint(after) {
		t.Errorf("the drained node was changed, or is not cordoned and tainted: %v, was %v", ours(after), ours(before))
	}
	world.WaitEvent(t, drained.Name, protocol.EventUninstallLeftNode)
	for _, name := range []string{"lease", aggregator.ClaimsLeaseName("lease")} {
		if _, err := world.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("lease %s: %v; want it deleted", name, err)
		}
	}
}

// ours lists the keys of the product's protocol on n, and its conditions.
func ours(n *corev1.Node) []string {
	var out []string
	all := maps.Clone(n.Annotations)
	maps.Copy(all, n.Labels)
	for k := range all {
		for _, key := range protocol.Keys {
			if key.Name == k && (key.Writer == protocol.Agent || key.Writer == protocol.Aggregator) || strings.HasPrefix(k, "maintenance-handler.io/") {
				out = append(out, k)
				break
			}
		}
	}
	for _, c := range protocol.ForgetConditions(n) {
		out = append(out, string(c))
	}
	for _, t := range n.Spec.Taints {
		if t.Key == protocol.TaintImpendingTermination || t.Key == protocol.TaintSliceDown {
			out = append(out, t.Key)
		}
	}
	slices.Sort(out)
	return out
}
