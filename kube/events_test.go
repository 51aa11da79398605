package kube

import (
	"sync/atomic"
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

// gatedSink is an EventSink whose writes wait for gate, and that counts
// them; started says that one began.
type gatedSink struct {
	gate    chan struct{}
	started chan struct{}
	writes  *atomic.Int64
}

func (s gatedSink) write(e *corev1.Event) (*corev1.Event, error) {
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-s.gate
	s.writes.Add(1)
	return e, nil
}

func (s gatedSink) Create(e *corev1.Event) (*corev1.Event, error)          { return s.write(e) }
func (s gatedSink) Update(e *corev1.Event) (*corev1.Event, error)          { return s.write(e) }
func (s gatedSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return s.write(e) }

// TestShutdownWritesWhatIsQueued: the Events recorded just before the
// agent stops (its last, when the VM stops) are written before Shutdown
// returns, not dropped with the process.
func TestShutdownWritesWhatIsQueued(t *testing.T) {
	sink := gatedSink{gate: make(chan struct{}), started: make(chan struct{}, 1), writes: &atomic.Int64{}}
	e := NewNodeEvents(sink, "agent", "gpu-0", "uid-0")
	for _, m := range []string{"drained", "terminating", "stopping"} {
		e.NodeEvent(false, "MaintenanceStarted", m)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Shutdown() }()
	<-sink.started // a write is held while Shutdown runs
	close(sink.gate)
	<-done
	if got := sink.writes.Load(); got != 3 {
		t.Errorf("%d of 3 Events written when Shutdown returned", got)
	}
}
