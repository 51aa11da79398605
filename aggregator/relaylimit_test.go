package aggregator

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestRelayBucketsOutliveTheNode: a node whose Node is deleted (forget)
// and created again under its name finds its bucket as it left it: its
// next call still waits. A bucket is dropped only once full again (no
// different from a new one), by forget or a later sweep: the buckets held
// stay those of nodes that asked within a refill.
func TestRelayBucketsOutliveTheNode(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	b := newRelayBuckets(clk, 60)
	for range relayBurst {
		b.take("hostile", relayCall)
	}
	b.forget("hostile")
	if d, _ := b.take("hostile", relayCall); d != time.Minute {
		t.Errorf("a call after the Node was deleted and created again waits %s; want a minute (its bucket kept)", d)
	}
	b.take("quiet", relayRead)
	b.forget("quiet") // not full yet: kept
	// Once every bucket is full again, the next take sweeps them all.
	clk.Step(time.Hour)
	b.take("asker", relayRead)
	if d := cmp.Diff([]string{relayRead + "/asker"}, slices.Sorted(maps.Keys(b.buckets))); d != "" {
		t.Errorf("buckets held after a refill (-want +got):\n%s", d)
	}
}
