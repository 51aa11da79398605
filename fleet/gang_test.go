package fleet

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestGangLabels: nodes sharing a pod group the aggregator found true are
// one gang, named after its first pod group, and so are nodes linked
// through several; a pod group on one node is no gang; a claim not found
// true counts for nothing, and one not read yet as it was; a slice's host stays in its slice; a gang down
// keeps its labels, and no node joins it until it is back.
func TestGangLabels(t *testing.T) {
	claim := func(group, pod string) protocol.PodGroupClaim {
		return protocol.PodGroupClaim{Namespace: "ml", PodGroup: group, Pod: pod}
	}
	node := func(name string, claims ...protocol.PodGroupClaim) *Node {
		return &Node{Name: name, PodGroups: claims}
	}
	forged := claim("train", "train-0") // d says it runs a's pod
	unread := claim("train", "train-9") // its read failed
	trueOf := func(node string, c protocol.PodGroupClaim) (bool, bool) {
		return !(node == "d" && c == forged) && c != unread, c != unread
	}
	labels := func(nodes ...*Node) map[string]string { return GangLabels(slices.Values(nodes), trueOf) }

	a, b, c := node("a", claim("train", "train-0")), node("b", claim("train", "train-1")), node("c", claim("train", "train-2"))
	d, e := node("d", forged), node("e", claim("solo", "solo-0"))
	if got, want := labels(a, b, c, d, e), map[string]string{"a": "ml.train", "b": "ml.train", "c": "ml.train", "d": "", "e": ""}; !cmp.Equal(got, want) {
		t.Errorf("one gang of three, a forged claim, a pod group on one node: %v, want %v", got, want)
	}
	// f runs pods of two groups: it joins them, named after the first.
	f := node("f", claim("eval", "eval-0"), claim("train", "train-3"))
	g := node("g", claim("eval", "eval-1"))
	got := labels(a, f, g)
	if want := map[string]string{"a": "ml.eval", "f": "ml.eval", "g": "ml.eval"}; !cmp.Equal(got, want) {
		t.Errorf("two pod groups linked through a node: %v, want %v", got, want)
	}
	// A pod not read yet: a node of the gang stays in it, another does not
	// join it.
	in, out := node("i", unread), node("o", unread)
	in.Gang = "ml.train"
	if got := labels(a, b, in, out); got["i"] != "ml.train" || got["o"] != "" {
		t.Errorf("pods not read yet: %v, want i kept in the gang and o out of it", got)
	}
	host := node("h", claim("train", "train-4"))
	host.GroupKind, host.Gang = protocol.GroupSlice, "ml.train"
	if got := labels(a, b, host); got["h"] != "" || got["a"] != "ml.train" {
		t.Errorf("a slice's host running a pod of the gang: %v, want it in no gang (its label removed)", got)
	}
	// The gang is down: b drains for a's host maintenance; c, whose pod
	// group is the gang's, does not join it, and b keeps its label though
	// its pods are gone.
	a.Gang, b.Gang = "ml.train", "ml.train"
	a.Phase, a.Reason, a.Deadline = protocol.PhaseDraining, protocol.ReasonHostMaintenance, time.Now()
	b.PodGroups = nil
	b.Ask = &protocol.SliceAsk{Slice: "ml.train", Cause: "a"}
	if got, want := labels(a, b, c), map[string]string{"a": "ml.train", "b": "ml.train", "c": ""}; !cmp.Equal(got, want) {
		t.Errorf("the gang down: %v, want its labels kept and no node joining it", got)
	}
	// Back: its pods gone, the gang is no more.
	a.Phase, a.PodGroups, b.Ask = protocol.PhaseIdle, nil, nil
	c.PodGroups = nil
	if got := labels(a, b, c); slices.ContainsFunc(slices.Collect(maps.Values(got)), func(v string) bool { return v != "" }) {
		t.Errorf("the gang back, its pods gone: %v, want every label removed", got)
	}
}
