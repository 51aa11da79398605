package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventSource is the component name on the agent's Events.
const EventSource = "maintenance-handler"

// NodeEvents records Kubernetes Events on one Node. The broadcaster
// aggregates repeats and rate-limits, so a flapping signal cannot flood the
// API server.
type NodeEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	ref         *corev1.ObjectReference
}

var _ Events = (*NodeEvents)(nil)

// NewNodeEvents returns a recorder for the Node named nodeName (whose UID
// is uid). Call Shutdown when done.
func NewNodeEvents(client kubernetes.Interface, nodeName string, uid types.UID) *NodeEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &NodeEvents{
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventSource, Host: nodeName}),
		ref:         &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: uid, APIVersion: "v1"},
	}
}

// NodeEvent records one Event.
func (e *NodeEvents) NodeEvent(warning bool, reason, message string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	e.recorder.Event(e.ref, typ, reason, message)
}

// Shutdown stops the broadcaster after flushing.
func (e *NodeEvents) Shutdown() { e.broadcaster.Shutdown() }
