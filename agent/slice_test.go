package agent

import (
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestFollowedAsk: a host follows its own reading of its slice or the
// aggregator's ask, the earlier deadline; the aggregator's is stale once
// its cause has no maintenance of that start under way.
func TestFollowedAsk(t *testing.T) {
	deadline := t0.Add(30 * time.Second)
	preempted := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline}
	back := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseIdle}
	own := &protocol.SliceAsk{Slice: "s", Cause: "h1", Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline}
	written := *own
	later := written
	later.Deadline = deadline.Add(time.Minute)
	gone := protocol.SliceAsk{Slice: "s", Cause: "h9", Reason: protocol.ReasonPreemption, Started: t0, Deadline: deadline.Add(-10 * time.Second)}
	for _, tc := range []struct {
		name    string
		own     *protocol.SliceAsk
		written protocol.SliceAsk
		set     bool
		hosts   []protocol.SliceHost
		want    *protocol.SliceAsk
	}{
		{"no aggregator: its own reading", own, protocol.SliceAsk{}, false, []protocol.SliceHost{preempted}, own},
		{"both, the aggregator's later: its own", own, later, true, []protocol.SliceHost{preempted}, own},
		{"the cause back, the aggregator's ask not yet withdrawn: none", nil, written, true, []protocol.SliceHost{back}, nil},
		{"the cause's Node gone (deleted): the aggregator's, earlier", own, gone, true, []protocol.SliceHost{preempted}, &gone},
		{"a new maintenance of the cause: the old ask is stale", nil, written, true, []protocol.SliceHost{{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonHostMaintenance, Started: t0.Add(time.Hour), Deadline: t0.Add(2 * time.Hour)}}, nil},
	} {
		got, ok := followedAsk(tc.own, tc.written, tc.set, tc.hosts)
		if ok != (tc.want != nil) || ok && got != *tc.want {
			t.Errorf("%s: %+v (%t), want %+v", tc.name, got, ok, tc.want)
		}
	}
}
