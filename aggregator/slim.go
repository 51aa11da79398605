package aggregator

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// slimNode drops from a cached Node what the aggregator never reads, before
// the informer keeps it: the managed fields, the image list (tens of
// kilobytes on a GKE node), the volumes, the daemon endpoints, the
// addresses, the node's configuration and features, all of nodeInfo but
// the kubelet's version and the boot ID, and each condition's reason and
// message. It keeps the metadata (whole: the aggregator's updates write
// it back), the spec, each condition's type, status and times, and the
// resources, which the fleet's reading of a Node uses. The aggregator updates Nodes from these copies: an update
// leaves the status as it is (a subresource) and omitted managed fields
// as they are.
func slimNode(obj kube.Object) kube.Object {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj
	}
	n.ManagedFields = nil
	n.Labels = interned(n.Labels, true)
	n.Annotations = interned(n.Annotations, false)
	conditions := make([]corev1.NodeCondition, len(n.Status.Conditions))
	for i, c := range n.Status.Conditions {
		conditions[i] = corev1.NodeCondition{Type: corev1.NodeConditionType(intern(string(c.Type))), Status: corev1.ConditionStatus(intern(string(c.Status))), LastHeartbeatTime: c.LastHeartbeatTime, LastTransitionTime: c.LastTransitionTime}
	}
	n.Status = corev1.NodeStatus{
		Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable, Phase: n.Status.Phase, Conditions: conditions,
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: n.Status.NodeInfo.KubeletVersion, BootID: n.Status.NodeInfo.BootID},
	}
	return n
}

// interned is m with its keys (and its values too, with values) each one
// string shared by every Node (strings.intern): the keys of labels and
// annotations, and the values of labels (a pool's name, a zone, "true"),
// repeat across a fleet, and each Node decoded from the API server holds
// copies of its own.
func interned(m map[string]string, values bool) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if values {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	return out
}

// internLimit bounds the strings held once: a fleet's keys and common
// values are a few hundred, and a value each node has its own (its host
// name) fills the rest once, after which new strings are kept as they
// come. The first strings seen are those every node repeats.
const internLimit = 1 << 14

// interns holds the strings held once. unique.Make would let them go with
// their last handle, each garbage collection, and a Node decoded after it
// would hold copies again; these are kept for the process's life, within
// internLimit.
var interns = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

func intern(s string) string {
	interns.Lock()
	defer interns.Unlock()
	if held, ok := interns.m[s]; ok {
		return held
	}
	if len(interns.m) < internLimit {
		interns.m[s] = s
	}
	return s
}
