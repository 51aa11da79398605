package aggregator

// A replica's memory against its container's limit: the aggregator holds
// every Node, so its memory grows with the fleet, and a limit set for a
// smaller fleet ends in the OOM killer, again and again, for the leader
// and then for the standby that takes over. It says so first.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/metrics"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// The thresholds, as fractions of the limit: a Warning at WarnAt, and
// again only after the memory fell below RearmAt.
const (
	WarnAt  = 0.9
	RearmAt = 0.8
	// MemoryCheckInterval is how often a replica compares.
	MemoryCheckInterval = 30 * time.Second
)

// NearLimit says whether used bytes, against limit, is a new warning (at
// WarnAt or more, where none is standing), and whether one stands after
// it (until used falls below RearmAt). A limit of 0 or less is unknown:
// nothing is said.
func NearLimit(used, limit int64, standing bool) (warn, stands bool) {
	switch {
	case limit <= 0:
		return false, false
	case float64(used) >= WarnAt*float64(limit):
		return !standing, true
	case float64(used) < RearmAt*float64(limit):
		return false, false
	}
	return false, standing
}

// GoMemory is the memory the Go runtime holds from the operating system
// (runtime/metrics' /memory/classes/total:bytes): what the replica's
// container is charged for, less its few non-Go pages.
func GoMemory() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// EventRecorder records an Event about an object.
type EventRecorder interface {
	Event(ref *corev1.ObjectReference, typ, reason, message string)
}

// MemoryGauges exports the replica's memory and its limit.
type MemoryGauges interface {
	Memory(used, limit int64)
}

// MemoryWatch compares a replica's memory with its container's limit every
// MemoryCheckInterval, exports both, and records a Warning Event
// (protocol.EventMemoryNearLimit) about the replica's pod when the memory
// reaches WarnAt of the limit.
type MemoryWatch struct {
	// Limit is the container's memory limit in bytes; 0: unknown, and
	// nothing is said.
	Limit int64
	// Used reads the replica's memory (GoMemory).
	Used func() int64
	// Pod is the replica's pod, which the Event is about.
	Pod      *corev1.ObjectReference
	Recorder EventRecorder
	Metrics  MemoryGauges
	Clock    clock.WithTicker
	Logger   *slog.Logger
}

// Start compares until ctx ends.
func (w *MemoryWatch) Start(ctx context.Context) error {
	standing := false
	t := w.Clock.NewTicker(MemoryCheckInterval)
	defer t.Stop()
	for {
		used := w.Used()
		w.Metrics.Memory(used, w.Limit)
		var warn bool
		warn, standing = NearLimit(used, w.Limit, standing)
		if warn {
			msg := fmt.Sprintf("This replica holds %d MiB of memory, %.0f%% of its container's limit of %d MiB: the aggregator's memory grows with the number of Nodes, and at the limit the replica is OOM-killed, then the replica that takes over. Raise aggregator.resources.limits.memory (the chart's README sizes it by fleet)",
				used>>20, 100*float64(used)/float64(w.Limit), w.Limit>>20)
			w.Logger.Warn("memory near the container's limit", "usedBytes", used, "limitBytes", w.Limit)
			w.Recorder.Event(w.Pod, corev1.EventTypeWarning, protocol.EventMemoryNearLimit, msg)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}
