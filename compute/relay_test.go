package compute

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestSchedulingCrossesTheNode: what the aggregator reads of a VM reaches
// the agent whole.
func TestSchedulingCrossesTheNode(t *testing.T) {
	s := Scheduling{Spot: true, PreemptionNotice: 2 * time.Minute, End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), EndCause: "maxRunDuration",
		Consumption: Consumption{Reservation: "r", Block: "b", SubBlock: "s"}, Topology: PhysicalTopology{Block: "tb", Subblock: "ts", Host: "th"}, MachineType: "a3-highgpu-8g", ProvisioningModel: "SPOT", Status: "RUNNING", NodePool: "a3-pool"}
	f := s.Facts("id-1")
	if f.ID != "id-1" {
		t.Errorf("the read's ID %q", f.ID)
	}
	if d := cmp.Diff(s, SchedulingOf(f)); d != "" {
		t.Errorf("the scheduling across the Node (-sent +read):\n%s", d)
	}
}

// TestOutcome: each error class has its outcome.
func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil: "", fmt.Errorf("x: %w", ErrPermissionDenied): protocol.ManualPermissionDenied,
		fmt.Errorf("x: %w", ErrRefused): protocol.ManualRefused, fmt.Errorf("timeout"): protocol.ManualFailed,
	} {
		if got := Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %q, want %q", err, got, want)
		}
	}
}
