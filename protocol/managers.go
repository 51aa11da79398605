package protocol

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// Field managers: the names under which the API server records who wrote
// each field of a Node (metadata.managedFields).
const (
	// FieldManagerAgent names the agent's writes, in every version.
	FieldManagerAgent = "maintenance-handler-agent"
	// FieldManagerGKE names the writes of GKE's own maintenance handler
	// (docs/gce.md).
	FieldManagerGKE = "gpu-maintenance-handler"
)

// EvictionRequester is the requester the agent's EvictionRequests name
// (lifecycle.k8s.io/v1alpha1 spec.requester, a domain-prefixed key).
const EvictionRequester = "maintenance-handler.io/agent"

// OwnsLabel reports whether manager wrote n's label key, as the Node's
// managed fields record it (an update that changed it, or an apply that
// set it). A write of the value a field already holds changes nothing and
// is not recorded: it takes the field from no one.
func OwnsLabel(n *corev1.Node, manager, key string) bool {
	return owns(n, manager, "f:metadata", "f:labels", "f:"+key)
}

// OwnsAnnotation is OwnsLabel for an annotation.
func OwnsAnnotation(n *corev1.Node, manager, key string) bool {
	return owns(n, manager, "f:metadata", "f:annotations", "f:"+key)
}

func owns(n *corev1.Node, manager string, path ...string) bool {
	for _, e := range n.ManagedFields {
		if e.Manager != manager || e.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		found := true
		for _, p := range path {
			next, ok := fields[p].(map[string]any)
			if !ok {
				found = false
				break
			}
			fields = next
		}
		if found {
			return true
		}
	}
	return false
}
