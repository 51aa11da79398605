package lifecycle

import (
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestStepPreemptionNotice: a Spot VM with a preemption notice drains by
// the notice and the soft-off after preempted turns TRUE, counted from
// when it did; without one, by the 30 s rule.
func TestStepPreemptionNotice(t *testing.T) {
	for _, tc := range []struct {
		notice time.Duration
		since  time.Duration // how long ago preempted turned TRUE
		want   time.Duration // the deadline, from now
	}{
		{notice: 0, want: 30 * time.Second},
		{notice: 2 * time.Minute, want: 150 * time.Second},
		{notice: 2 * time.Minute, since: 20 * time.Second, want: 130 * time.Second},
	} {
		o := obs(with(func(s *Signals) { s.Preempted = true }))
		o.PreemptionNotice = tc.notice
		if tc.since > 0 {
			o.Signals.PreemptedSince = t0.Add(-tc.since)
		}
		d := stepChecked(t, cfg, State{}, o)
		if d.State.Reason != protocol.ReasonPreemption || !d.State.Deadline.Equal(t0.Add(tc.want)) || d.Drain.Voluntary {
			t.Errorf("notice %s, preempted %s ago: %s by %s (voluntary %t); want a forced drain by now+%s", tc.notice, tc.since, d.State.Reason, d.State.Deadline, d.Drain.Voluntary, tc.want)
		}
	}
}
