package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestForcedCauseMovesOthersOnlyConfirmed: a proven host's forced
// maintenance (preemption, host maintenance, known end, repair) moves the
// other hosts of its slice or gang only where it is confirmed; on its
// agent's word alone it moves nobody.
func TestForcedCauseMovesOthersOnlyConfirmed(t *testing.T) {
	idle := protocol.SliceHost{Name: "h2", Phase: protocol.PhaseIdle}
	for _, reason := range []protocol.Reason{protocol.ReasonHostMaintenance, protocol.ReasonPreemption, protocol.ReasonFault, protocol.ReasonKnownEnd} {
		for _, confirmed := range []bool{false, true} {
			cause := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: reason, Started: t0, Deadline: t0.Add(time.Minute), Confirmed: confirmed}
			for _, kind := range []protocol.GroupKind{protocol.GroupSlice, protocol.GroupGang} {
				if got := SliceAsks("g", kind, []protocol.SliceHost{cause, idle}, t0)["h2"] != nil; got != confirmed {
					t.Errorf("%s of a %s member, confirmed %t: the other member asked %t", reason, kind, confirmed, got)
				}
			}
		}
	}
}

// TestConfirmsCause: what the aggregator read of a VM bears out a forced
// maintenance only where Compute Engine says the VM stops (or is gone), or
// its host maintenance is ONGOING or imminent, or its end near; a repair
// only with the aggregator's approval.
func TestConfirmsCause(t *testing.T) {
	now := t0
	running := VMNow{Status: "RUNNING"}
	lead := 30 * time.Minute
	for _, tc := range []struct {
		name     string
		reason   protocol.Reason
		vm       VMNow
		reported bool
		want     bool
	}{
		{"preempted, the VM running", protocol.ReasonPreemption, running, false, false},
		{"preempted, the VM stopping", protocol.ReasonPreemption, VMNow{Status: "STOPPING"}, false, true},
		{"preempted, the VM terminated", protocol.ReasonPreemption, VMNow{Status: "TERMINATED"}, false, true},
		{"preempted, the VM gone", protocol.ReasonPreemption, VMNow{Gone: true}, false, true},
		{"preempted, a maintenance imminent: no preemption", protocol.ReasonPreemption, VMNow{Status: "RUNNING", MaintenanceStatus: "ONGOING"}, false, false},
		{"host maintenance, none scheduled", protocol.ReasonHostMaintenance, running, false, false},
		{"host maintenance, ONGOING", protocol.ReasonHostMaintenance, VMNow{Status: "RUNNING", MaintenanceStatus: "ONGOING"}, false, true},
		{"host maintenance, its window in 50 minutes", protocol.ReasonHostMaintenance, VMNow{Status: "RUNNING", MaintenanceStatus: "PENDING", MaintenanceStart: now.Add(50 * time.Minute)}, false, true},
		{"host maintenance, its window in a week", protocol.ReasonHostMaintenance, VMNow{Status: "RUNNING", MaintenanceStatus: "PENDING", MaintenanceStart: now.Add(7 * 24 * time.Hour)}, false, false},
		{"host maintenance, the VM stopping", protocol.ReasonHostMaintenance, VMNow{Status: "STOPPING"}, false, true},
		{"known end, none", protocol.ReasonKnownEnd, running, false, false},
		{"known end, within the lead", protocol.ReasonKnownEnd, VMNow{Status: "RUNNING", End: now.Add(20 * time.Minute)}, false, true},
		{"known end, a day ahead", protocol.ReasonKnownEnd, VMNow{Status: "RUNNING", End: now.Add(24 * time.Hour)}, false, false},
		{"a repair reported", protocol.ReasonFault, VMNow{Status: "RUNNING"}, true, true},
		{"a repair approved, not reported, the VM running", protocol.ReasonFault, running, false, false},
		{"a repair not reported, the VM stopping", protocol.ReasonFault, VMNow{Status: "STOPPING"}, false, true},
	} {
		got, why := ConfirmsCause(tc.reason, tc.vm, tc.reported, lead, now)
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s: confirmed (-want +got):\n%s (why: %q)", tc.name, d, why)
		}
		if !got && why == "" {
			t.Errorf("%s: refused with no reason given", tc.name)
		}
	}
}
