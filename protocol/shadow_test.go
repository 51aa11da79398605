package protocol

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func shadowNode(labels map[string]string, unschedulable bool, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: map[string]string{"keep": "x"}},
		Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
}

var (
	ours   = corev1.Taint{Key: TaintImpendingTermination, Effect: corev1.TaintEffectNoSchedule}
	theirs = corev1.Taint{Key: "gpu", Value: "x", Effect: corev1.TaintEffectNoExecute}
)

func TestShadowShowsTheUnmadeWrites(t *testing.T) {
	found := shadowNode(map[string]string{LabelPerformMaintenance: "true", "pool": "a"}, false, theirs)
	decided := shadowNode(map[string]string{LabelActiveMaintenance: ValueOngoing, "pool": "a"}, true, theirs, ours)
	var s Shadow
	if !s.Record(found, decided) {
		t.Fatal("Record reported no change")
	}
	if s.Record(decided, decided) {
		t.Error("Record of no change reported one")
	}
	if keys, cordon := s.Changed(); !reflect.DeepEqual(keys, []string{LabelActiveMaintenance, TaintImpendingTermination, LabelPerformMaintenance}) || !cordon {
		t.Errorf("Changed = %v, %v", keys, cordon)
	}
	// The Node as it still is, from the watch: shown as decided.
	shown := found.DeepCopy()
	s.Overlay(shown)
	if !reflect.DeepEqual(shown.Labels, decided.Labels) || !shown.Spec.Unschedulable || !reflect.DeepEqual(shown.Spec.Taints, decided.Spec.Taints) ||
		shown.Annotations["keep"] != "x" {
		t.Errorf("overlay = %+v %+v, want %+v %+v", shown.Labels, shown.Spec, decided.Labels, decided.Spec)
	}
	if !reflect.DeepEqual(found, shadowNode(map[string]string{LabelPerformMaintenance: "true", "pool": "a"}, false, theirs)) {
		t.Error("Overlay changed another Node than the one given")
	}

	// Back where it was found: the shadow forgets the change.
	var back Shadow
	back.Record(found, decided)
	back.Record(decided, found)
	if !back.Empty() {
		t.Errorf("a change undone is still held: %+v", back)
	}
}

func TestShadowYieldsToAnotherWriter(t *testing.T) {
	found := shadowNode(map[string]string{LabelPerformMaintenance: "true"}, false)
	decided := shadowNode(map[string]string{LabelActiveMaintenance: ValueOngoing}, true, ours)
	var s Shadow
	s.Record(found, decided)

	// A person removes the label the component had consumed, cordons the
	// node, and sets a taint of the component's key herself.
	person := shadowNode(nil, true, corev1.Taint{Key: TaintImpendingTermination, Value: "hers", Effect: corev1.TaintEffectNoSchedule})
	shown := person.DeepCopy()
	s.Overlay(shown)
	if _, ok := shown.Labels[LabelPerformMaintenance]; ok {
		t.Error("the label the person removed is shown")
	}
	if shown.Labels[LabelActiveMaintenance] != ValueOngoing {
		t.Error("the component's own label is lost")
	}
	if len(shown.Spec.Taints) != 1 || shown.Spec.Taints[0].Value != "hers" {
		t.Errorf("taints = %v, want the person's", shown.Spec.Taints)
	}
	if keys, cordon := s.Changed(); !reflect.DeepEqual(keys, []string{LabelActiveMaintenance}) || cordon {
		t.Errorf("after another writer: Changed = %v, %v; want the component's label alone", keys, cordon)
	}
	// The person sets the label again: the component sees a new request.
	again := shadowNode(map[string]string{LabelPerformMaintenance: "true"}, false)
	s.Overlay(again)
	if again.Labels[LabelPerformMaintenance] != "true" {
		t.Error("a new request is hidden by the forgotten change")
	}
}
