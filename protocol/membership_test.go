package protocol

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTPUMachine: a TPU machine type names its chips per VM; any other
// machine type is no TPU VM.
func TestTPUMachine(t *testing.T) {
	type read struct {
		Family string
		Chips  int
	}
	got := map[string]read{}
	for _, mt := range []string{"ct5p-hightpu-4t", "ct5lp-hightpu-8t", "ct6e-standard-1t", "ct4p-hightpu-4t", "tpu7x-standard-4t",
		"a3-highgpu-8g", "a4x-highgpu-4g", "n2-standard-8", "ct5p-hightpu-99t", "ct5p", ""} {
		f, c := TPUMachine(mt)
		got[mt] = read{f, c}
	}
	want := map[string]read{"ct5p-hightpu-4t": {"ct5p", 4}, "ct5lp-hightpu-8t": {"ct5lp", 8}, "ct6e-standard-1t": {"ct6e", 1}, "ct4p-hightpu-4t": {"ct4p", 4},
		"tpu7x-standard-4t": {"tpu7x", 4}, "a3-highgpu-8g": {}, "a4x-highgpu-4g": {}, "n2-standard-8": {}, "ct5p-hightpu-99t": {}, "ct5p": {}, "": {}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("TPU machine types (-want +got):\n%s", d)
	}
}

// TestMembershipProvenByFacts: what a node's kubelet writes (its pool,
// TPU topology and gce-topology-* labels, TPU chips in its capacity) is a
// claim; the node is a proven member of the group it claims only where
// the aggregator's read of its VM agrees. A GPU VM is no host of a TPU
// slice, whatever its labels and capacity, nor is a TPU VM of another
// pool or of none; a VM is in no reservation group but the one it runs
// in.
func TestMembershipProvenByFacts(t *testing.T) {
	slice := map[string]string{LabelNodePool: "v5p", LabelTPUTopology: "2x2x4", LabelTPUAccelerator: "tpu-v5p-slice"}
	group := map[string]string{LabelNodePool: "a4x", LabelTopologyBlock: "b1", LabelTopologySubblock: "s1"}
	node := func(labels map[string]string, tpu string, facts *VMFacts) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: map[string]string{}}}
		if tpu != "" {
			n.Status.Capacity = corev1.ResourceList{ResourceTPU: resource.MustParse(tpu)}
		}
		if facts != nil {
			n.Annotations[AnnotationVMFacts] = Encode(*facts)
		}
		return n
	}
	tpuVM := &VMFacts{ID: "r", MachineType: "ct5p-hightpu-4t", NodePool: "v5p"}
	otherPool := &VMFacts{ID: "r", MachineType: "ct5p-hightpu-4t", NodePool: "v5p-b"}
	noPool := &VMFacts{ID: "r", MachineType: "ct5p-hightpu-4t"}
	inBlock := &VMFacts{ID: "r", MachineType: "a4x-highgpu-4g", Reservation: "res", Block: "res/b", SubBlock: "res/b/s", PhysicalBlock: "b1", PhysicalSubblock: "s1"}
	elsewhere := *inBlock
	elsewhere.PhysicalSubblock = "s2"
	otherBlock := *inBlock
	otherBlock.PhysicalBlock = "b9"
	noReservation := &VMFacts{ID: "r", MachineType: "a4x-highgpu-4g", PhysicalBlock: "b1", PhysicalSubblock: "s1"}
	pool := Grouping{PoolLabel: LabelNodePool}
	sub := Grouping{PoolLabel: LabelNodePool, Reservation: ReservationGroupSubblock}
	block := Grouping{PoolLabel: LabelNodePool, Reservation: ReservationGroupBlock}
	for _, tc := range []struct {
		name string
		g    Grouping
		n    *corev1.Node
		want string // a part of why, "" for proven
	}{
		{"a TPU host, its VM read", pool, node(slice, "4", tpuVM), ""},
		{"a TPU host, its VM not read yet", pool, node(slice, "4", nil), "not read its VM"},
		{"its VM's read failed", pool, node(slice, "4", &VMFacts{ID: "r", Error: "denied"}), "could not read its VM"},
		{"a GPU VM labelled into the pool, TPU chips patched in", pool, node(slice, "4", &VMFacts{ID: "r", MachineType: "a3-highgpu-8g"}), "no TPU VM"},
		{"a TPU VM of another generation", pool, node(slice, "4", &VMFacts{ID: "r", MachineType: "ct6e-standard-4t", NodePool: "v5p"}), "no VM of its TPU accelerator"},
		{"a TPU VM of the same generation from another pool, labelled into this one", pool, node(slice, "4", otherPool), `its VM is in the node pool "v5p-b", not in "v5p"`},
		{"a TPU VM without GKE's pool label", pool, node(slice, "4", noPool), "carries no GKE node pool label"},
		{"a TPU host under another pool label, its VM read", Grouping{PoolLabel: "example.com/pool"}, node(map[string]string{"example.com/pool": "v5p", LabelTPUTopology: "2x2x4", LabelTPUAccelerator: "tpu-v5p-slice"}, "4", tpuVM), ""},
		{"a single-host TPU VM that patched fewer chips in", pool, node(map[string]string{LabelNodePool: "one", LabelTPUTopology: "2x4"}, "4", &VMFacts{ID: "r", MachineType: "ct5lp-hightpu-8t", NodePool: "one"}), "no multi-host slice"},
		{"the operator's slice label: its word", Grouping{SliceLabel: "example.com/slice"}, node(map[string]string{"example.com/slice": "s"}, "", nil), ""},
		{"a reservation sub-block, its VM there", sub, node(group, "", inBlock), ""},
		{"a reservation block, its VM there", block, node(group, "", inBlock), ""},
		{"a sub-block label its VM is not in", sub, node(group, "", &elsewhere), "sub-block \"s2\""},
		{"a block label its VM is not in", block, node(group, "", &otherBlock), "block \"b9\""},
		{"a VM in no reservation", sub, node(group, "", noReservation), "no reservation block"},
		{"the labels alone", sub, node(group, "", nil), "not read its VM"},
		{"in no group", sub, node(map[string]string{LabelNodePool: "a4x"}, "", nil), ""},
	} {
		why := tc.g.Unproven(tc.n)
		if tc.want == "" && why != "" || tc.want != "" && !strings.Contains(why, tc.want) {
			t.Errorf("%s: unproven %q; want %q", tc.name, why, tc.want)
		}
		if h := tc.g.HostOf(tc.n); h.Unproven != (why != "") {
			t.Errorf("%s: the host's Unproven %t, unproven %q", tc.name, h.Unproven, why)
		}
	}
}
