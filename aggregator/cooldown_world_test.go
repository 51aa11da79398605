package aggregator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestFailingVoluntaryMaintenanceCoolsDown: real agent and aggregator
// processes; Compute Engine refuses every performMaintenance of the node
// (no permission). Each failure is recorded on the Node by its agent, and
// the aggregator does not pick the node again before the cool-down, which
// doubles with each failure: one call per cool-down, not one per pass.
func TestFailingVoluntaryMaintenanceCoolsDown(t *testing.T) {
	testworld.Need(t)
	const cooldown = 3 * time.Second
	p := newProcs(t, "--voluntary-failure-cooldown", cooldown.String())
	f := p.f
	ctx := testworld.Ctx(t, 5*time.Minute)
	const name = "cool-0"
	v, err := f.Add(ctx, testworld.NodeSpec{Name: name, Pool: "cool"}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	v.Emu.SetPermissionDenied(true)
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[protocol.AnnotationOpportunisticConfig] = "node-idle-time=1s,min-nodes=0,window=2419200s"
		_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p.aggregator("agg-cool", testworld.FreeAddrT(t))

	// The first and the second failure, seen as the agent writes them.
	var first, second protocol.Failures
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		second = protocol.ReadAgentState(n).Failures
		if second.Count == 1 {
			first = second
		}
		return second.Count >= 2, nil
	})
	if err != nil {
		t.Fatalf("never two failures recorded: %+v", second)
	}
	// (Count is 2 unless this test was slow enough to miss a whole cool-down.)
	if want := cooldown << (second.Count - 1); second.Reason != protocol.ManualPermissionDenied || second.RetryAfter.Sub(second.Last) != want {
		t.Errorf("failure %d recorded as %+v; want permission_denied and a cool-down of %s", second.Count, second, want)
	}
	if first.Count != 1 || second.Last.Sub(first.Last) < cooldown {
		t.Errorf("failures at %v and %v; want the second at least the %s cool-down after the first", first.Last, second.Last, cooldown)
	}
	if calls := len(v.Emu.Calls()); calls < second.Count || calls > second.Count+1 {
		t.Errorf("%d performMaintenance calls after %d failures; want one per cool-down", calls, second.Count)
	}
	// Between the two, the aggregator said why it waited.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := world.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + protocol.EventSkipped})
		if err != nil {
			return false, nil
		}
		for _, e := range list.Items {
			if strings.Contains(e.Message, "not picked again before") && strings.Contains(e.Message, protocol.ManualPermissionDenied) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Error("no Event saying the node is cooling down")
	}
}
