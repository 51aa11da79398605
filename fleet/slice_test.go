package fleet

import (
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// confirmAll confirms every forced maintenance (fleet.Confirmed).
func confirmAll(string, protocol.Reason, time.Time) bool { return true }

func TestSliceAsks(t *testing.T) {
	host := func(name string, phase protocol.Phase, reason protocol.Reason, deadline time.Duration) Node {
		n := Node{Name: name, Slice: "v5p", Phase: phase, Reason: reason}
		if phase != protocol.PhaseIdle {
			n.Started, n.Deadline = now, now.Add(deadline)
		}
		return n
	}
	idle := func(name string) Node { return host(name, protocol.PhaseIdle, "", 0) }
	asked := func(n Node) Node { n.ManualAsked = true; return n }
	for _, tc := range []struct {
		name  string
		nodes []Node
		cause string // "" for no ask anywhere
		by    time.Duration
	}{
		{"all idle: no ask", []Node{idle("a"), idle("b"), idle("c")}, "", 0},
		{"one preempted: the others asked, by its deadline", []Node{idle("a"), host("b", protocol.PhaseDraining, protocol.ReasonPreemption, 30*time.Second), idle("c")}, "b", 30 * time.Second},
		{"two in maintenance: the earliest deadline is the cause",
			[]Node{host("a", protocol.PhaseDraining, protocol.ReasonHostMaintenance, time.Hour), host("b", protocol.PhaseTerminating, protocol.ReasonPreemption, 30*time.Second), idle("c")}, "b", 30 * time.Second},
		{"a manual maintenance asked for takes the slice too", []Node{asked(host("a", protocol.PhaseDraining, protocol.ReasonManual, time.Hour)), idle("b")}, "a", time.Hour},
		{"a manual maintenance on the node's own word takes nobody", []Node{host("a", protocol.PhaseDraining, protocol.ReasonManual, time.Hour), idle("b")}, "", 0},
		{"hosts drained for the slice alone cause nothing: back", []Node{host("a", protocol.PhaseTerminating, protocol.ReasonSlice, time.Minute), idle("b")}, "", 0},
	} {
		got := SliceAsks(tc.nodes, now, confirmAll)
		for _, n := range tc.nodes {
			ask, ok := got[n.Name]
			if !ok {
				t.Errorf("%s: %s is not in the result", tc.name, n.Name)
				continue
			}
			switch {
			case tc.cause == "" || n.Name == tc.cause:
				if ask != nil {
					t.Errorf("%s: %s asked %+v, want none", tc.name, n.Name, ask)
				}
			case ask == nil || ask.Cause != tc.cause || !ask.Deadline.Equal(now.Add(tc.by)) || ask.Slice != "v5p":
				t.Errorf("%s: %s asked %+v, want cause %s by %s", tc.name, n.Name, ask, tc.cause, now.Add(tc.by))
			}
		}
	}
	// A node's word moves its slice only as far as it reaches: one in the
	// slice by its labels alone, or one whose maintenance started in the
	// future, causes no ask.
	labelledIn := host("gpu-node", protocol.PhaseDraining, protocol.ReasonPreemption, 30*time.Second)
	labelledIn.SliceUnproven = true
	future := host("b", protocol.PhaseDraining, protocol.ReasonPreemption, 30*time.Second)
	future.Started = now.Add(time.Hour)
	for what, nodes := range map[string][]Node{"labelled in": {labelledIn, idle("a")}, "started in the future": {future, idle("a")}} {
		if got := SliceAsks(nodes, now, confirmAll); got["a"] != nil {
			t.Errorf("a host %s preempted: its sibling asked %+v, want none", what, got["a"])
		}
	}
	if got := SliceAsks([]Node{{Name: "single-host"}}, now, confirmAll); len(got) != 0 {
		t.Errorf("a node of no slice: %v", got)
	}
	// A reservation group's member preempted, or in host maintenance,
	// drains alone; a manual maintenance of one takes the group.
	member := func(name string, phase protocol.Phase, reason protocol.Reason) Node {
		n := host(name, phase, reason, time.Hour)
		n.Slice, n.GroupKind = "block-7/sub-3", protocol.GroupReservation
		return n
	}
	for _, reason := range []protocol.Reason{protocol.ReasonPreemption, protocol.ReasonHostMaintenance, protocol.ReasonFault} {
		if got := SliceAsks([]Node{member("a", protocol.PhaseDraining, reason), member("b", protocol.PhaseIdle, "")}, now, confirmAll); got["b"] != nil {
			t.Errorf("a reservation group's member in %s: its sibling asked %+v, want none", reason, got["b"])
		}
	}
	if got := SliceAsks([]Node{asked(member("a", protocol.PhaseDraining, protocol.ReasonManual)), member("b", protocol.PhaseIdle, "")}, now, confirmAll); got["b"] == nil || got["b"].Cause != "a" {
		t.Errorf("a reservation group's manual maintenance asked for: its sibling asked %+v, want a's", got["b"])
	}
	if got := SliceAsks([]Node{member("a", protocol.PhaseDraining, protocol.ReasonManual), member("b", protocol.PhaseIdle, "")}, now, confirmAll); got["b"] != nil {
		t.Errorf("a reservation group's member in a manual maintenance on its own word: its sibling asked %+v, want none", got["b"])
	}
}

// TestSliceAsksKeptWhileTheCauseIsGone: a slice whose preempted host's
// Node was deleted is short of hosts, so not back: its hosts keep their
// asks, up to the limit; a slice whole again, or one of unknown size, is.
func TestSliceAsksKeptWhileTheCauseIsGone(t *testing.T) {
	ask := &protocol.SliceAsk{Slice: "v5p", Cause: "d", Reason: protocol.ReasonPreemption, Started: now.Add(-time.Hour), Deadline: now.Add(-time.Hour + 30*time.Second)}
	host := func(name string, size int) Node {
		return Node{Name: name, Slice: "v5p", SliceHosts: size, Phase: protocol.PhaseTerminating, Reason: protocol.ReasonSlice, Started: ask.Started, Deadline: ask.Deadline, Ask: ask}
	}
	three := []Node{host("a", 4), host("b", 4), host("c", 4)}
	for name, got := range SliceAsks(three, now, confirmAll) {
		if got != ask {
			t.Errorf("3 of 4 hosts, the cause's Node gone: %s asked %+v, want the ask it carries", name, got)
		}
	}
	// A node labelled into the slice fills no host's place, nor says how
	// many hosts it has.
	claimant := Node{Name: "0-gpu", Slice: "v5p", SliceHosts: 1, SliceUnproven: true}
	for name, got := range SliceAsks(append([]Node{claimant}, three...), now, confirmAll) {
		if name != claimant.Name && got != ask {
			t.Errorf("3 of 4 hosts and a node labelled in: %s asked %+v, want the ask it carries", name, got)
		}
	}
	for _, tc := range []struct {
		name  string
		nodes []Node
		at    time.Time
	}{
		{"past the limit", three, ask.Started.Add(lifecycle.SliceDrainLimit)},
		{"every host there", append(append([]Node(nil), three...), Node{Name: "d", Slice: "v5p", SliceHosts: 4}), now},
		{"a slice of unknown size", []Node{host("a", 0), host("b", 0)}, now},
		{"an ask that names another slice", func() []Node {
			other := *ask
			other.Slice = "v6e"
			nodes := []Node{host("a", 4), host("b", 4), host("c", 4)}
			for i := range nodes {
				nodes[i].Ask = &other
			}
			return nodes
		}(), now},
	} {
		for name, got := range SliceAsks(tc.nodes, tc.at, confirmAll) {
			if got != nil {
				t.Errorf("%s: %s asked %+v, want back in service", tc.name, name, got)
			}
		}
	}
}

// TestSliceAsksForcedOnlyConfirmed: a proven host's preemption moves the
// other hosts only where the aggregator confirmed it, or where an ask it
// wrote for that very maintenance already stands on a host (a leader
// before confirmed it): not for another start, nor another cause.
func TestSliceAsksForcedOnlyConfirmed(t *testing.T) {
	none := func(string, protocol.Reason, time.Time) bool { return false }
	preempted := Node{Name: "b", Slice: "v5p", Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: now, Deadline: now.Add(30 * time.Second)}
	written := &protocol.SliceAsk{Slice: "v5p", Cause: "b", Reason: protocol.ReasonPreemption, Started: now, Deadline: preempted.Deadline}
	older := *written
	older.Started = now.Add(-time.Hour)
	for _, tc := range []struct {
		name      string
		confirmed Confirmed
		standing  *protocol.SliceAsk
		want      bool
	}{
		{"confirmed", confirmAll, nil, true},
		{"not confirmed", none, nil, false},
		{"not confirmed, its ask standing", none, written, true},
		{"not confirmed, an ask for an earlier start standing", none, &older, false},
	} {
		idle := Node{Name: "a", Slice: "v5p", Phase: protocol.PhaseIdle, Ask: tc.standing}
		got := SliceAsks([]Node{idle, preempted}, now, tc.confirmed)["a"]
		if (got != nil) != tc.want || got != nil && got.Cause != "b" {
			t.Errorf("%s: a asked %+v; want an ask %t", tc.name, got, tc.want)
		}
	}
}
