package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// sinkLog is an EventSink that tells each write.
type sinkLog struct{ writes chan string }

func (s sinkLog) Create(e *corev1.Event) (*corev1.Event, error) {
	s.writes <- "create " + e.Reason + ": " + e.Message
	return e, nil
}

func (s sinkLog) Update(e *corev1.Event) (*corev1.Event, error) {
	s.writes <- "update " + e.Reason + ": " + e.Message
	return e, nil
}

func (s sinkLog) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	s.writes <- "patch " + e.Reason + ": " + e.Message
	return e, nil
}

// TestNodeEventsKeepEveryMessage: a repeat is counted on the Event already
// written (a patch), and Events of one reason with different messages are
// each written as they were said, never combined, however many.
func TestNodeEventsKeepEveryMessage(t *testing.T) {
	sink := sinkLog{writes: make(chan string, 64)}
	e := NewNodeEvents(sink, "agent", "gpu-0", "uid-0")
	defer e.Shutdown()
	e.NodeEvent(true, "EvictionBlocked", "pod a")
	if got := <-sink.writes; got != "create EvictionBlocked: pod a" {
		t.Fatalf("first write %q", got)
	}
	e.NodeEvent(true, "EvictionBlocked", "pod a")
	if got := <-sink.writes; got != "patch EvictionBlocked: pod a" {
		t.Fatalf("a repeat written as %q; want a patch of the first", got)
	}
	for _, m := range []string{"pod b", "pod c", "pod d", "pod e", "pod f", "pod g", "pod h", "pod i", "pod j", "pod k", "pod l", "pod m"} {
		e.NodeEvent(true, "EvictionBlocked", m)
		if got, want := <-sink.writes, "create EvictionBlocked: "+m; got != want {
			t.Fatalf("written %q; want %q", got, want)
		}
	}
}
