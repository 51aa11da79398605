package lifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestStepIdleSince(t *testing.T) {
	o := obs(quiet())
	o.PodsKnown, o.Idle = true, true
	d := Step(cfg, State{}, o)
	if !d.State.IdleSince.Equal(t0) || d.State.Busy != "" {
		t.Fatalf("idle: %+v", d.State)
	}
	later := o
	later.Now = t0.Add(time.Hour)
	if again := Step(cfg, d.State, later); !again.State.IdleSince.Equal(t0) {
		t.Errorf("idle since moved to %s while still idle", again.State.IdleSince)
	}
	busy := later
	busy.Idle, busy.Busy = false, protocol.BusyAccelerators
	b := Step(cfg, d.State, busy)
	if d := cmp.Diff(State{Phase: protocol.PhaseIdle, LastEvent: "NONE", Busy: protocol.BusyAccelerators}, b.State, ignoreAccounting); d != "" {
		t.Errorf("busy (-want +got):\n%s", d)
	}
	unknown := busy
	unknown.PodsKnown = false
	if u := Step(cfg, d.State, unknown); !u.State.IdleSince.Equal(t0) {
		t.Error("unknown pods changed idleness")
	}
}
