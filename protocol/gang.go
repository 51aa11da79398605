package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A gang is the pods of one pod group (a PodGroup, named by the pods'
// spec.schedulingGroup.podGroupName, Kubernetes 1.35 and later) spread
// over several nodes: a job that runs only whole, so that one node's stop
// stops it on every node. Its nodes are maintained as a slice's hosts are
// (GroupGang). Who is in a gang is read from the pods, never from a node's
// word alone: each agent lists on its own Node the pod groups its pods are
// in, naming one pod of each (AnnotationPodGroups); the aggregator reads
// that pod, and only where the pod is on that node and in that group does
// it put its name for the gang, LabelGang, which no agent may write, on
// the node. A node can so join only a gang it really runs a pod of, whose
// work it could stop anyway.

const (
	// AnnotationPodGroups is the agent's list of the pod groups its node's
	// running pods are in, each with one of its pods (EncodePodGroups), at
	// most MaxPodGroups.
	AnnotationPodGroups = "maintenance-handler.io/pod-groups"
	// LabelGang is the aggregator's name for the gang the node's pods run
	// in with other nodes' (GangName), on every node of it.
	LabelGang = "maintenance-handler.io/gang"
)

// MaxPodGroups bounds the pod groups an agent lists: the aggregator reads
// one pod for each pod group a node lists, so an unbounded list would let
// one node make the leader read thousands of pods every pass. A node runs
// the pods of a few jobs at once (one per accelerator at most: 8 GPUs or
// TPU chips a VM), so 32 leaves room and bounds a node's reads. An agent
// lists the first MaxPodGroups by name (OnePerGroup); a list of more is
// no agent's, and is unreadable (DecodePodGroups): it counts as none.
const MaxPodGroups = 32

// PodGroupClaim is one pod group a node's agent says its node runs: the
// group, and one pod of it on the node, which shows it.
type PodGroupClaim struct {
	Namespace, PodGroup, Pod string
}

// Group names the pod group among all: namespace/podgroup.
func (c PodGroupClaim) Group() string { return c.Namespace + "/" + c.PodGroup }

// PodGroupOf is p's pod group, if it names one.
func PodGroupOf(p *corev1.Pod) (PodGroupClaim, bool) {
	if g := p.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" {
		return PodGroupClaim{Namespace: p.Namespace, PodGroup: *g.PodGroupName, Pod: p.Name}, true
	}
	return PodGroupClaim{}, false
}

// OnePerGroup is claims with one pod per group, the first by name,
// sorted by group, the first MaxPodGroups groups only: what
// AnnotationPodGroups holds.
func OnePerGroup(claims []PodGroupClaim) []PodGroupClaim {
	byGroup := map[string]PodGroupClaim{}
	for _, c := range claims {
		if was, ok := byGroup[c.Group()]; !ok || c.Pod < was.Pod {
			byGroup[c.Group()] = c
		}
	}
	out := slices.Collect(maps.Values(byGroup))
	slices.SortFunc(out, func(a, b PodGroupClaim) int { return strings.Compare(a.Group(), b.Group()) })
	return out[:min(len(out), MaxPodGroups)]
}

// EncodePodGroups writes claims as AnnotationPodGroups' value:
// "namespace/podgroup=pod" each, comma-separated (OnePerGroup); "" for
// none.
func EncodePodGroups(claims []PodGroupClaim) string {
	var out []string
	for _, c := range OnePerGroup(claims) {
		out = append(out, c.Group()+"="+c.Pod)
	}
	return strings.Join(out, ",")
}

// DecodePodGroups reads AnnotationPodGroups' value; an entry that is not
// a namespace, a pod group and a pod, each a valid name, is an error, and
// so are more than MaxPodGroups entries: the value counts as none.
func DecodePodGroups(v string) ([]PodGroupClaim, error) {
	if v == "" {
		return nil, nil
	}
	if n := strings.Count(v, ",") + 1; n > MaxPodGroups {
		return nil, fmt.Errorf("%s: %d pod groups, more than the %d an agent lists", AnnotationPodGroups, n, MaxPodGroups)
	}
	var out []PodGroupClaim
	for _, e := range strings.Split(v, ",") {
		group, pod, ok1 := strings.Cut(e, "=")
		ns, pg, ok2 := strings.Cut(group, "/")
		if !ok1 || !ok2 || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(pg)) > 0 || len(validation.IsDNS1123Subdomain(pod)) > 0 {
			return nil, fmt.Errorf("%s: %q is not namespace/podgroup=pod", AnnotationPodGroups, e)
		}
		out = append(out, PodGroupClaim{Namespace: ns, PodGroup: pg, Pod: pod})
	}
	return out, nil
}

// ReadPodGroups reads n's AnnotationPodGroups (none where unreadable).
func ReadPodGroups(n *corev1.Node) []PodGroupClaim {
	claims, err := DecodePodGroups(n.Annotations[AnnotationPodGroups])
	if err != nil {
		return nil
	}
	return claims
}

// GangName is LabelGang's value for the gang of the pod group
// namespace/podgroup: "namespace.podgroup" where that is a label value
// (a namespace has no dot, so it reads back), else its first 54
// characters and 8 hexadecimal digits of its hash.
func GangName(namespace, podGroup string) string {
	name := namespace + "." + podGroup
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(namespace + "/" + podGroup))
	prefix := strings.TrimRight(name[:min(len(name), 54)], ".-_")
	return prefix + "-" + hex.EncodeToString(sum[:4])
}
