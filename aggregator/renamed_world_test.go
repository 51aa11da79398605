package aggregator_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	earlier := func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: old[protocol.TaintFaulty], Effect: corev1.TaintEffectNoSchedule})
	}
	write(t, faulty, earlier)
	write(t, healthy, earlier)

	noOld := func(n *corev1.Node) bool { return !protocol.HasRenamedTaint(n) }
	world.WaitNode(t, faulty, "tainted faulty under the key now only", func(n *corev1.Node) bool {
		return noOld(n) && protocol.HasTaintKey(n, protocol.TaintFaulty)
	})
	world.WaitNode(t, healthy, "not tainted faulty, under any key", func(n *corev1.Node) bool {
		return noOld(n) && !protocol.HasTaintKey(n, protocol.TaintFaulty)
	})
}
