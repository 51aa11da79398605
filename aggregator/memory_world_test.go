package aggregator_test

import (
	"path/filepath"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestMemoryNearLimitIsSaid: a replica whose memory is past 90% of its
// container's limit (here 8 MiB, less than it needs to start) records a
// Warning Event about its pod saying so and what to do, and exports the
// limit.
func TestMemoryNearLimitIsSaid(t *testing.T) {
	testworld.Need(t)
	p := newProcs(t)
	addr := testworld.FreeAddrT(t)
	// GOMEMLIMIT set: the Go runtime is not held to 90% of so small a
	// limit (it would collect garbage without end).
	agg, err := world.StartProcessEnv("aggregator-memory", []string{"GOMEMLIMIT=off"}, filepath.Join(p.bins, "aggregator"),
		"--kubeconfig", world.AggregatorKubeconfigT(t, p.ns), "--namespace", p.ns, "--identity", "memory-0", "--config-map", "",
		"--listen-address", addr, "--log-level", "warn", "--memory-limit", "8Mi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })
	e := world.WaitObjectEvent(t, "Pod", p.ns, "memory-0", protocol.EventMemoryNearLimit, "of its container's limit of 8 MiB", "Raise aggregator.resources.limits.memory")
	if e.Type != "Warning" || e.Source.Component != protocol.EventSourceAggregator {
		t.Errorf("Event %s from %q, want a Warning from the aggregator", e.Type, e.Source.Component)
	}
	if got := scrape(addr)["maintenance_handler_aggregator_memory_limit_bytes"]; got != 8<<20 {
		t.Errorf("memory_limit_bytes = %v, want %d", got, 8<<20)
	}
}
