package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestTaintsOfAnEarlierReleaseRenamed: Nodes carry the faulty taint
// under the key an earlier release wrote, which cluster-autoscaler copies
// into its pools' templates. The aggregator renames it: the faulty node
// keeps its faulty taint, under its key now; the healthy node, whose old
// taint nothing would otherwise ever remove, ends with none. (The
// slice-down taint is renamed the same way: TestRenameTaints.)
func TestTaintsOfAnEarlierReleaseRenamed(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	fp := newFaultyPool(t, ctx, "renamed", 2)
	faulty, healthy := fp.names[0], fp.names[1]
	old := map[string]string{}
	for was, now := range protocol.RenamedTaints {
		old[now] = was
	}
	setCondition(t, faulty, corev1.ConditionTrue)
	world.WaitNode(t, faulty, "tainted faulty", func(n *corev1.Node) bool { return protocol.HasTaintKey(n, protocol.TaintFaulty) })
	addTaints(t, faulty, old[protocol.TaintFaulty])
	addTaints(t, healthy, old[protocol.TaintFaulty])

	noOld := func(n *corev1.Node) bool { return !protocol.HasRenamedTaint(n) }
	world.WaitNode(t, faulty, "tainted faulty under the key now only", func(n *corev1.Node) bool {
		return noOld(n) && protocol.HasTaintKey(n, protocol.TaintFaulty)
	})
	world.WaitNode(t, healthy, "not tainted faulty, under any key", func(n *corev1.Node) bool {
		return noOld(n) && !protocol.HasTaintKey(n, protocol.TaintFaulty)
	})
}

// addTaints puts NoSchedule taints of keys on name, as an earlier release
// left them.
func addTaints(t testing.TB, name string, keys ...string) {
	t.Helper()
	ctx := testworld.Ctx(t, 30*time.Second)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, k := range keys {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
		_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
