package protocol

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestPodGroups: the agent's list keeps one pod per group, the first by
// name, sorted; it reads back; a value that is not namespace/podgroup=pod,
// each a name, reads as none and is unreadable.
func TestPodGroups(t *testing.T) {
	claims := []PodGroupClaim{
		{Namespace: "ml", PodGroup: "train", Pod: "train-2"},
		{Namespace: "ml", PodGroup: "train", Pod: "train-0"},
		{Namespace: "batch", PodGroup: "sim.v2", Pod: "sim-0"},
	}
	v := EncodePodGroups(claims)
	if want := "batch/sim.v2=sim-0,ml/train=train-0"; v != want {
		t.Fatalf("EncodePodGroups: %q, want %q", v, want)
	}
	got, err := DecodePodGroups(v)
	if want := []PodGroupClaim{claims[2], claims[1]}; err != nil || !cmp.Equal(got, want) {
		t.Fatalf("DecodePodGroups(%q): %v %v, want %v", v, got, err, want)
	}
	if v := EncodePodGroups(nil); v != "" {
		t.Errorf("no groups: %q, want none", v)
	}
	for _, bad := range []string{"ml/train", "train=train-0", "ml/train=", "Ml/train=p", "ml/Train=p", "ml/train=p,", "a.b/train=p", "ml/train=p/q"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationPodGroups: bad}}}
		if _, err := DecodePodGroups(bad); err == nil {
			t.Errorf("DecodePodGroups(%q): no error", bad)
		}
		if got := ReadAgentState(n).PodGroups; got != nil {
			t.Errorf("%q reads as %v, want none", bad, got)
		}
		if u := Unreadable(n); !cmp.Equal(u, []string{AnnotationPodGroups}) {
			t.Errorf("%q: unreadable %v, want the pod groups", bad, u)
		}
	}
}

// TestGangName: a gang's name is a label value, its pod group's where that
// fits, and two pod groups never share one.
func TestGangName(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, tc := range []struct{ ns, pg, want string }{
		{"ml", "train", "ml.train"},
		{"ml", "train.v2", "ml.train.v2"},
	} {
		if got := GangName(tc.ns, tc.pg); got != tc.want {
			t.Errorf("GangName(%q, %q) = %q, want %q", tc.ns, tc.pg, got, tc.want)
		}
	}
	a, b := GangName("ml", long), GangName("ml", long+"b")
	for _, v := range []string{a, b, GangName("ml", strings.Repeat("a.", 40)+"b")} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("GangName gave %q, not a label value: %v", v, errs)
		}
	}
	if a == b {
		t.Errorf("two pod groups share the gang name %q", a)
	}
}

// TestGangGroup: a node with the aggregator's gang label is in that gang,
// after a slice and before a reservation group.
func TestGangGroup(t *testing.T) {
	g := Grouping{PoolLabel: LabelNodePool, Reservation: ReservationGroupBlock}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelGang: "ml.train", LabelTopologyBlock: "block-1"}}}
	if got, want := g.GroupOf(n), (Group{Kind: GroupGang, Name: "ml.train", Label: LabelGang, Value: "ml.train"}); got != want {
		t.Errorf("a gang's node in a reservation block: %+v, want %+v", got, want)
	}
	delete(n.Labels, LabelGang)
	if got := g.GroupOf(n); got.Kind != GroupReservation {
		t.Errorf("without the gang label: %+v, want its reservation group", got)
	}
}

// TestPodGroupsBound: an agent lists at most MaxPodGroups pod groups, the
// first by name; a list of more is no agent's: it reads as none, and is
// unreadable (the aggregator then reads none of its pods, and warns).
func TestPodGroupsBound(t *testing.T) {
	claims := func(n int) []PodGroupClaim {
		var out []PodGroupClaim
		for i := range n {
			out = append(out, PodGroupClaim{Namespace: "ml", PodGroup: fmt.Sprintf("job-%03d", i), Pod: fmt.Sprintf("p-%03d", i)})
		}
		return out
	}
	if got := OnePerGroup(claims(40)); !cmp.Equal(got, claims(MaxPodGroups)) {
		t.Errorf("an agent's list of 40 pod groups: %d, want the first %d", len(got), MaxPodGroups)
	}
	for _, tc := range []struct {
		groups     int
		readable   bool
		readAsSome bool
	}{
		{groups: MaxPodGroups, readable: true, readAsSome: true},
		{groups: MaxPodGroups + 1},
		{groups: 5000},
	} {
		var entries []string
		for _, c := range claims(tc.groups) {
			entries = append(entries, c.Group()+"="+c.Pod)
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationPodGroups: strings.Join(entries, ",")}}}
		got := struct{ Readable, Some bool }{len(Unreadable(n)) == 0, len(ReadAgentState(n).PodGroups) > 0}
		if want := (struct{ Readable, Some bool }{tc.readable, tc.readAsSome}); got != want {
			t.Errorf("%d pod groups: readable, read as some %+v, want %+v", tc.groups, got, want)
		}
	}
}
