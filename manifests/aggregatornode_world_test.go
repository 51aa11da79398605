package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// aggregatorWritesOnlyItsKeys: with its own token, the aggregator may
// change on node its own keys (its trigger, its approval, its taints), and
// nothing else: not a label or taint of anyone else's, not the agent's
// state, not the cordon. Each write is a dry run.
func aggregatorWritesOnlyItsKeys(t *testing.T, agg kubernetes.Interface, node string) {
	t.Helper()
	ctx := testworld.Ctx(t, 2*time.Minute)
	update := func(ctx context.Context, change func(n *corev1.Node)) error {
		n, err := agg.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		change(n)
		_, err = agg.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const fenced = "the maintenance-handler aggregator may change only"
	teamLabel := func(n *corev1.Node) { n.Labels["team"] = "research" }
	// The API server takes the policy up a moment after it is written.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := update(ctx, teamLabel)
		return err != nil && strings.Contains(err.Error(), fenced), nil
	}); err != nil {
		t.Fatalf("the aggregator's node policy never took effect: %v", err)
	}
	taint := func(key string) func(n *corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	for what, change := range map[string]func(n *corev1.Node){
		"another label":      teamLabel,
		"another annotation": func(n *corev1.Node) { n.Annotations["example.com/owner"] = "someone" },
		"the agent's state":  func(n *corev1.Node) { n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining) },
		"the agent's label":  func(n *corev1.Node) { n.Labels[protocol.LabelActiveMaintenance] = "true" },
		"another taint":      taint("example.com/dedicated"),
		"the agent's taint":  taint(protocol.TaintImpendingTermination),
		"the cordon":         func(n *corev1.Node) { n.Spec.Unschedulable = true },
	} {
		if err := update(ctx, change); err == nil || !strings.Contains(err.Error(), fenced) {
			t.Errorf("the aggregator changing %s: %v, want denied saying %q", what, err, fenced)
		}
	}
	for what, change := range map[string]func(n *corev1.Node){
		"its trigger":         func(n *corev1.Node) { n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue },
		"its repair approval": func(n *corev1.Node) { n.Annotations[protocol.AnnotationFaultRepair] = "{}" },
		"its faulty taint":    taint(protocol.TaintFaulty),
		"its slice taint":     taint(protocol.TaintSliceDown),
	} {
		if err := update(ctx, change); err != nil {
			t.Errorf("the aggregator writing %s: %v, want allowed", what, err)
		}
	}
}
