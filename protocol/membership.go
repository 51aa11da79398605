package protocol

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Membership: a node's group, as Grouping.GroupOf reads it, is a claim.
// The labels it reads (the node pool, the TPU topology, GKE's
// gce-topology-* labels) and the TPU chips in the Node's capacity are
// written by the node's own kubelet, which can write anything there. A
// decision about another node rests on what that node cannot write, so a
// claimed member is a proven one only where facts the aggregator read from
// Compute Engine (AnnotationVMFacts, the answer to the VM read) agree
// with the claim:
//   - a multi-host TPU slice by its pool (GKE): the VM is a TPU VM (its
//     machine type names its chips, as every TPU machine type does:
//     ct5p-hightpu-4t has 4), of the generation its accelerator label
//     names, made for the pool its pool label names (the VM's
//     goog-k8s-node-pool-name resource label, VMFacts.NodePool, which GKE
//     sets on every VM of a node pool and no node identity can change:
//     else a TPU VM of the same generation in another pool would relabel
//     itself into this pool's slice), and the topology's chips span more
//     than one such VM;
//   - a reservation group: the VM consumes a reservation block, and runs
//     in the block (and, for a sub-block group, the sub-block) its labels
//     name (resourceStatus.physicalHostTopology, which GKE's
//     gce-topology-* labels mirror). Not its pool: a reservation's block
//     serves the VMs of any pool that consumes it.
//
// A slice the operator names by a label of its own (Grouping.SliceLabel)
// is the operator's word, and a gang is named by the aggregator's label:
// both are proven as they are. An unproven member still follows its
// group's asks (draining itself costs only its own service), but its own
// maintenance moves no other member (lifecycle.Believed), and it counts
// alone against the caps.

// tpuFamilies is the machine type family of each TPU accelerator label
// value GKE sets (cloud.google.com/gke-tpu-accelerator), as Google's "Plan
// TPUs in GKE" page pairs them
// (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
var tpuFamilies = map[string]string{
	"tpu-v4-podslice":      "ct4p",
	"tpu-v5-lite-podslice": "ct5lp",
	"tpu-v5p-slice":        "ct5p",
	"tpu-v6e-slice":        "ct6e",
	"tpu7x":                "tpu7x",
}

// TPUMachine reads a TPU machine type's name (ct5p-hightpu-4t,
// ct6e-standard-8t, tpu7x-standard-4t): its family (ct5p) and its chips
// per VM (4), the count its last part ends in "t" with; 0 chips when
// machineType is no TPU machine type.
func TPUMachine(machineType string) (family string, chips int) {
	parts := strings.Split(machineType, "-")
	if len(parts) < 3 || !strings.HasPrefix(parts[0], "ct") && !strings.HasPrefix(parts[0], "tpu") {
		return "", 0
	}
	last := parts[len(parts)-1]
	n, err := strconv.Atoi(strings.TrimSuffix(last, "t"))
	if !strings.HasSuffix(last, "t") || err != nil || n < 1 || n > MaxTPUChipsPerHost {
		return "", 0
	}
	return parts[0], n
}

// Unproven says why n's membership of its group (GroupOf) is not proven
// by facts n cannot write ("" when it is, or n is in no group).
func (g Grouping) Unproven(n *corev1.Node) string {
	switch group := g.GroupOf(n); {
	case group.Kind == GroupSlice && g.SliceLabel == "":
		return g.sliceUnproven(n)
	case group.Kind == GroupReservation:
		return g.reservationUnproven(n)
	}
	return ""
}

// HostOf is n as a host of its group (SliceHostOf), with whether its
// membership is unproven.
func (g Grouping) HostOf(n *corev1.Node) SliceHost {
	h := SliceHostOf(n)
	h.Unproven = g.Unproven(n) != ""
	return h
}

// factsOf is what the aggregator read of n's VM, or why there is none.
func factsOf(n *corev1.Node) (VMFacts, string) {
	f, ok := ReadVMFacts(n)
	switch {
	case !ok:
		return f, "the aggregator has not read its VM from Compute Engine yet (no " + AnnotationVMFacts + ")"
	case f.Error != "":
		return f, "the aggregator could not read its VM from Compute Engine: " + f.Error
	}
	return f, ""
}

func (g Grouping) sliceUnproven(n *corev1.Node) string {
	f, why := factsOf(n)
	if why != "" {
		return why
	}
	family, chips := TPUMachine(f.MachineType)
	if chips == 0 {
		return fmt.Sprintf("its VM is a %s, no TPU VM", f.MachineType)
	}
	accelerator := n.Labels[LabelTPUAccelerator]
	if want, known := tpuFamilies[accelerator]; known && want != family {
		return fmt.Sprintf("its VM is a %s, no VM of its TPU accelerator %s", f.MachineType, accelerator)
	}
	switch pool := n.Labels[g.PoolLabel]; {
	case f.NodePool == "":
		return "its VM carries no GKE node pool label (" + VMResourceLabelNodePool + ")"
	case f.NodePool != pool:
		return fmt.Sprintf("its VM is in the node pool %q, not in %q its label %s names", f.NodePool, pool, g.PoolLabel)
	}
	topology := n.Labels[LabelTPUTopology]
	if all := TopologyChips(topology); all <= chips || all%chips != 0 {
		return fmt.Sprintf("its TPU topology %s (%d chips) is no multi-host slice of %s VMs (%d chips each)", topology, all, f.MachineType, chips)
	}
	return ""
}

func (g Grouping) reservationUnproven(n *corev1.Node) string {
	f, why := factsOf(n)
	switch {
	case why != "":
		return why
	case f.Block == "":
		return "its VM consumes no reservation block"
	case f.PhysicalBlock != n.Labels[LabelTopologyBlock]:
		return fmt.Sprintf("its VM runs in the block %q, not in %q its label %s names", f.PhysicalBlock, n.Labels[LabelTopologyBlock], LabelTopologyBlock)
	case g.Reservation == ReservationGroupSubblock && f.PhysicalSubblock != n.Labels[LabelTopologySubblock]:
		return fmt.Sprintf("its VM runs in the sub-block %q, not in %q its label %s names", f.PhysicalSubblock, n.Labels[LabelTopologySubblock], LabelTopologySubblock)
	}
	return ""
}
