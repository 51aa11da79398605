package protocol

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// autoscalerConditionTaints are the taints cluster-autoscaler itself
// takes for a node's condition and leaves out of its node groups'
// templates (NodeConditionTaints in its utils/taints/taints.go), of
// those the product writes.
var autoscalerConditionTaints = map[string]bool{TaintImpendingTermination: true}

// TestProductTaintsLeaveTheAutoscalerAlone: every taint the agent or the
// aggregator puts on a Ready node is one cluster-autoscaler leaves out of
// the template it scales a pool up from, so a faulty node, or a slice
// going down, does not stop its pool from growing.
func TestProductTaintsLeaveTheAutoscalerAlone(t *testing.T) {
	for _, k := range Keys {
		if k.Kind != Taint || (k.Writer != Agent && k.Writer != Aggregator) {
			continue
		}
		if !strings.HasPrefix(k.Name, AutoscalerStatusTaintPrefix) && !autoscalerConditionTaints[k.Name] {
			t.Errorf("the %s's taint %s: cluster-autoscaler copies it into its pool's template; want it under %s", k.Writer, k.Name, AutoscalerStatusTaintPrefix)
		}
		if errs := validation.IsQualifiedName(k.Name); len(errs) > 0 {
			t.Errorf("taint %s: %v", k.Name, errs)
		}
	}
}

func TestRenameTaints(t *testing.T) {
	old := func(key string) corev1.Taint {
		for was, now := range RenamedTaints {
			if now == key {
				return corev1.Taint{Key: was, Effect: corev1.TaintEffectNoSchedule}
			}
		}
		t.Fatalf("no old key for %s", key)
		return corev1.Taint{}
	}
	other := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	faulty := corev1.Taint{Key: TaintFaulty, Effect: corev1.TaintEffectNoSchedule}
	slice := corev1.Taint{Key: TaintSliceDown, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name      string
		in, want  []corev1.Taint
		wantWrite bool
	}{
		{"none", nil, nil, false},
		{"current keys only", []corev1.Taint{other, faulty}, []corev1.Taint{other, faulty}, false},
		{"old faulty renamed in place", []corev1.Taint{old(TaintFaulty), other}, []corev1.Taint{faulty, other}, true},
		{"both old", []corev1.Taint{old(TaintSliceDown), old(TaintFaulty)}, []corev1.Taint{slice, faulty}, true},
		{"old beside new: the old dropped", []corev1.Taint{old(TaintFaulty), faulty, other}, []corev1.Taint{faulty, other}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Taints: tc.in}}
			if got := RenameTaints(n); got != tc.wantWrite {
				t.Errorf("changed %t, want %t", got, tc.wantWrite)
			}
			if d := cmp.Diff(tc.want, n.Spec.Taints); d != "" {
				t.Errorf("taints (-want +got):\n%s", d)
			}
		})
	}
}
