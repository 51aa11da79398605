package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// NodeEvents records the agent's Kubernetes Events on its Node (source
// protocol.EventSourceAgent).
//
// client-go's recorder drops Events by default once a source has sent 25
// about one object (then one per five minutes), whatever they say: a burst
// of warnings would silence the lifecycle Events after it. Here only
// repeats of the very same Event (reason and message) are limited that way;
// the agent keeps its noisy warnings rare at the source (one per key and
// change of condition), so every lifecycle Event is recorded. Repeats are
// still aggregated into a count by the recorder.
type NodeEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	ref         *corev1.ObjectReference
}

// NewNodeEvents returns a recorder for the Node named nodeName (whose UID
// is uid) that writes to sink (Client.EventSink). Call Shutdown when
// done.
func NewNodeEvents(sink record.EventSink, nodeName string, uid types.UID) *NodeEvents {
	b := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{SpamKeyFunc: spamKey}))
	b.StartRecordingToSink(sink)
	return &NodeEvents{
		broadcaster: b,
		recorder:    b.NewRecorder(Scheme, corev1.EventSource{Component: protocol.EventSourceAgent, Host: nodeName}),
		ref:         &corev1.ObjectReference{Kind: "Node", Name: nodeName, UID: uid, APIVersion: "v1"},
	}
}

// spamKey groups the Events that share one rate limit: the same Event
// about the same object from the same source.
func spamKey(e *corev1.Event) string {
	return strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Name,
		string(e.InvolvedObject.UID), e.Type, e.Reason, e.Message}, "\x00")
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
