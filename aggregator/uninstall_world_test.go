package aggregator_test

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
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
	f := vms.ForTest(t, world)
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

	// The uninstall's own calls, for what it wrote to the drained node:
	// the node's labels, taints and spec may still move after the agent's
	// kill (a write it had in flight, the node lifecycle controller's
	// unschedulable taint), so a snapshot cannot tell who changed them.
	cfg := rest.CopyConfig(world.Config)
	writes := &requestLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writes.wrap(rt) })
	c, l := clientsFor(t, cfg)
	done, err := aggregator.Uninstall(ctx, c, l, clock.RealClock{}, aggregator.UninstallScope{Namespace: ns, AgentNamespace: ns, LeaseName: "lease"}, slog.New(slog.DiscardHandler))
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
	if w := writes.to("/api/v1/nodes/" + drained.Name); len(w) > 0 {
		t.Errorf("the uninstall wrote to the drained node: %v", w)
	}
	if kept, had := ours(after), ours(before); !isSubset(had, kept) || !after.Spec.Unschedulable || !protocol.HasTaint(after) {
		t.Errorf("the drained node keeps %v, was %v; cordoned %v, tainted %v", kept, had, after.Spec.Unschedulable, protocol.HasTaint(after))
	}
	world.WaitEvent(t, drained.Name, protocol.EventUninstallLeftNode)
	for _, name := range []string{"lease", aggregator.ClaimsLeaseName("lease")} {
		if _, err := world.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("lease %s: %v; want it deleted", name, err)
		}
	}
}

// requestLog records each call other than a read that goes through it.
type requestLog struct {
	mu    sync.Mutex
	calls []string // "METHOD path"
}

func (l *requestLog) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			l.mu.Lock()
			l.calls = append(l.calls, r.Method+" "+r.URL.Path)
			l.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

// to lists the recorded calls to path and its subresources.
func (l *requestLog) to(path string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		if _, p, _ := strings.Cut(c, " "); p == path || strings.HasPrefix(p, path+"/") {
			out = append(out, c)
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// isSubset reports whether every element of sub is in of.
func isSubset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
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
