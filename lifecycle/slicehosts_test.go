package lifecycle

import (
	"slices"
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
		got, ok := FollowedAsk(tc.own, tc.written, tc.set, protocol.GroupSlice, tc.hosts)
		if ok != (tc.want != nil) || ok && got != *tc.want {
			t.Errorf("%s: %+v (%t), want %+v", tc.name, got, ok, tc.want)
		}
	}
	// In a reservation group, an aggregator's ask for a member's forced
	// event is no ask.
	if got, ok := FollowedAsk(nil, written, true, protocol.GroupReservation, []protocol.SliceHost{preempted}); ok {
		t.Errorf("a reservation group's member follows %+v, an ask for another member's preemption", got)
	}
}

// TestGroupAsksByKind: in a multi-host slice and in a gang every host's
// own maintenance, forced or voluntary, takes the others with it; in a
// reservation group only a voluntary one does, and a member's host
// maintenance, preemption, fault repair or known end drains that member
// alone.
func TestGroupAsksByKind(t *testing.T) {
	idle := protocol.SliceHost{Name: "h2", Phase: protocol.PhaseIdle}
	for _, reason := range []protocol.Reason{protocol.ReasonHostMaintenance, protocol.ReasonPreemption, protocol.ReasonFault, protocol.ReasonKnownEnd, protocol.ReasonManual} {
		cause := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: reason, Started: t0, Deadline: t0.Add(time.Hour), Asked: true, Confirmed: true}
		for _, kind := range []protocol.GroupKind{protocol.GroupSlice, protocol.GroupGang, protocol.GroupReservation} {
			asks := SliceAsks("g", kind, []protocol.SliceHost{cause, idle}, t0)
			want := kind != protocol.GroupReservation || reason == protocol.ReasonManual
			if got := asks["h2"] != nil; got != want {
				t.Errorf("%s of a member of a %s: the other member asked to drain %t; want %t", reason, kind, got, want)
			}
			if asks["h1"] != nil {
				t.Errorf("%s of a member of a %s: the cause is asked to follow itself", reason, kind)
			}
		}
	}
}

// TestManualAsksOnlyWhenAsked: a proven host's manual maintenance moves
// the other hosts of its group, of every kind, only where someone who is
// not the node asked for it (the perform-maintenance label, or the
// aggregator's accepted call, until its bound): on the node's own word it
// drains itself alone, and the aggregator's ask written for it is
// followed no longer.
func TestManualAsksOnlyWhenAsked(t *testing.T) {
	idle := protocol.SliceHost{Name: "h2", Phase: protocol.PhaseIdle}
	until := t0.Add(time.Hour)
	for _, tc := range []struct {
		name  string
		asked bool
		until time.Time
		now   time.Time
		want  bool
	}{
		{"on its own word", false, time.Time{}, t0, false},
		{"asked (the label)", true, time.Time{}, t0, true},
		{"the aggregator's accepted call, within its bound", true, until, t0, true},
		{"the aggregator's accepted call, past its bound", true, until, until, false},
	} {
		cause := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: t0, Deadline: t0.Add(20 * time.Hour),
			Asked: tc.asked, AskedUntil: tc.until}
		hosts := []protocol.SliceHost{cause, idle}
		for _, kind := range []protocol.GroupKind{protocol.GroupSlice, protocol.GroupGang, protocol.GroupReservation} {
			if got := SliceAsks("g", kind, hosts, tc.now)["h2"] != nil; got != tc.want {
				t.Errorf("%s, in a %s: the other member asked to drain %t; want %t", tc.name, kind, got, tc.want)
			}
			written := protocol.SliceAsk{Slice: "g", Cause: "h1", Reason: protocol.ReasonManual, Started: t0, Deadline: cause.Deadline}
			if _, ok := FollowedAsk(nil, written, true, kind, hosts); ok != tc.asked {
				t.Errorf("%s, in a %s: the aggregator's ask followed %t; want %t", tc.name, kind, ok, tc.asked)
			}
		}
	}
}

// TestSliceAsksBelieveOnlyProvenHosts: a host's own maintenance takes its
// group down only where its membership is proven and its start is not in
// the future (beyond ClockSkew); an unproven host, or one whose start lies
// ahead, moves nobody, whatever its reason, and a proven host's
// maintenance still does while an unproven one claims to be earlier.
func TestSliceAsksBelieveOnlyProvenHosts(t *testing.T) {
	now := t0.Add(time.Hour)
	host := func(name string, unproven bool, started time.Time, deadline time.Duration) protocol.SliceHost {
		return protocol.SliceHost{Name: name, Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: started, Deadline: now.Add(deadline), Unproven: unproven, Confirmed: true}
	}
	idle := protocol.SliceHost{Name: "real-1", Phase: protocol.PhaseIdle}
	for _, tc := range []struct {
		name  string
		hosts []protocol.SliceHost
		cause string
	}{
		{"a proven host preempted: the slice drains", []protocol.SliceHost{host("real-0", false, now, 30*time.Second), idle}, "real-0"},
		{"an unproven host preempted: nobody drains", []protocol.SliceHost{host("gpu-x", true, now, 30*time.Second), idle}, ""},
		{"a proven host whose start is far ahead: nobody drains", []protocol.SliceHost{host("real-0", false, now.Add(365*24*time.Hour), 30*time.Second), idle}, ""},
		{"a start within the clock skew: believed", []protocol.SliceHost{host("real-0", false, now.Add(ClockSkew), 30*time.Second), idle}, "real-0"},
		{"an unproven host's earlier deadline does not displace the proven cause",
			[]protocol.SliceHost{host("gpu-x", true, now, time.Second), host("real-0", false, now, time.Minute), idle}, "real-0"},
	} {
		for _, kind := range []protocol.GroupKind{protocol.GroupSlice, protocol.GroupGang} {
			asks := SliceAsks("s", kind, tc.hosts, now)
			got := ""
			if a := asks["real-1"]; a != nil {
				got = a.Cause
			}
			if got != tc.cause {
				t.Errorf("%s (%s): real-1 asked to drain for %q; want %q", tc.name, kind, got, tc.cause)
			}
		}
	}
}

// TestSliceCallerPrefersProven: an unproven host's manual maintenance
// started first does not make it the caller of its slice's voluntary
// maintenance while a proven host asks for one, nor does a proven host's
// that no one but the node asked for; alone, it is the caller, and waits
// for hosts that never follow it.
func TestSliceCallerPrefersProven(t *testing.T) {
	manual := func(name string, unproven bool, started time.Duration) protocol.SliceHost {
		return protocol.SliceHost{Name: name, Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: t0.Add(started), Deadline: t0.Add(time.Hour), Unproven: unproven, Asked: true}
	}
	if got := SliceCaller([]protocol.SliceHost{manual("a-forged", true, -time.Hour), manual("b-real", false, 0)}); got != "b-real" {
		t.Errorf("caller %q; want the proven b-real", got)
	}
	unasked := manual("a-unasked", false, -time.Hour)
	unasked.Asked = false
	if got := SliceCaller([]protocol.SliceHost{unasked, manual("b-real", false, 0)}); got != "b-real" {
		t.Errorf("caller %q; want the asked b-real", got)
	}
	hosts := []protocol.SliceHost{manual("a-forged", true, 0), {Name: "b-real", Phase: protocol.PhaseIdle, Ready: true}}
	caller := SliceCaller(hosts)
	waiting, _, _ := SliceDrained(hosts, caller, t0)
	if caller != "a-forged" || !slices.Equal(waiting, []string{"b-real"}) || SliceAsks("s", protocol.GroupSlice, hosts, t0)["b-real"] != nil {
		t.Errorf("an unproven caller alone: caller %q, waiting %v; want it the caller, waiting for b-real, which is not asked to drain", caller, waiting)
	}
}

// TestSliceSignal: a host that starts to drain for its slice wakes no
// other host; one whose own maintenance starts, whose drain ends, or whose
// Node turns NotReady does.
func TestSliceSignal(t *testing.T) {
	idle := protocol.SliceHost{Name: "h", Phase: protocol.PhaseIdle, Ready: true}
	following := protocol.SliceHost{Name: "h", Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Started: t0, Deadline: t0.Add(time.Minute), Ready: true}
	drained := following
	drained.Phase = protocol.PhaseTerminating
	incomplete := following
	incomplete.Drain = protocol.DrainIncomplete
	preempted := protocol.SliceHost{Name: "h", Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: t0, Deadline: t0.Add(30 * time.Second), Ready: true}
	down := idle
	down.Ready = false
	if SliceSignal(idle) != SliceSignal(following) {
		t.Errorf("following its slice wakes the other hosts")
	}
	for name, h := range map[string]protocol.SliceHost{"drained": drained, "incomplete": incomplete, "preempted": preempted, "NotReady": down} {
		if SliceSignal(h) == SliceSignal(following) || SliceSignal(h) == SliceSignal(idle) {
			t.Errorf("%s wakes no other host", name)
		}
	}
}

// TestSliceCallerAndDrained: the one host that asks Compute Engine for a
// slice's voluntary maintenance, and which other hosts it waits for.
func TestSliceCallerAndDrained(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	h := func(name string, phase protocol.Phase, reason protocol.Reason, started time.Duration, drain protocol.DrainEnd, ready bool) protocol.SliceHost {
		return protocol.SliceHost{Name: name, Phase: phase, Reason: reason, Started: at.Add(started), Deadline: at.Add(time.Hour), Drain: drain, Ready: ready}
	}
	idle := func(name string) protocol.SliceHost {
		return protocol.SliceHost{Name: name, Phase: protocol.PhaseIdle, Ready: true}
	}
	for _, tc := range []struct {
		name                string
		hosts               []protocol.SliceHost
		caller              string
		waiting, incomplete []string
	}{
		{"no voluntary maintenance: no caller", []protocol.SliceHost{h("a", protocol.PhaseDraining, protocol.ReasonPreemption, 0, "", true), idle("b")}, "", []string{"a", "b"}, nil},
		{"the host a person asked calls, once the others are drained",
			[]protocol.SliceHost{idle("a"), h("b", protocol.PhaseDraining, protocol.ReasonManual, 0, "", true), h("c", protocol.PhaseDraining, protocol.ReasonSlice, time.Second, "", true), h("d", protocol.PhaseTerminating, protocol.ReasonSlice, time.Second, "", true)},
			"b", []string{"a", "c"}, nil},
		{"two asked: the first to start calls; the other's drain done counts",
			[]protocol.SliceHost{h("a", protocol.PhaseDraining, protocol.ReasonManual, time.Second, protocol.DrainDone, true), h("b", protocol.PhaseDraining, protocol.ReasonManual, 0, "", true)}, "b", nil, nil},
		{"the same start: the first by name", []protocol.SliceHost{h("b", protocol.PhaseDraining, protocol.ReasonManual, 0, "", true), h("a", protocol.PhaseDraining, protocol.ReasonManual, 0, "", true)}, "a", []string{"b"}, nil},
		{"a host whose drain gave up",
			[]protocol.SliceHost{h("a", protocol.PhaseDraining, protocol.ReasonManual, 0, "", true), h("b", protocol.PhaseDraining, protocol.ReasonSlice, 0, protocol.DrainIncomplete, true), idle("c")},
			"a", []string{"c"}, []string{"b"}},
	} {
		caller := SliceCaller(tc.hosts)
		waiting, incomplete, _ := SliceDrained(tc.hosts, caller, at)
		if caller != tc.caller || !slices.Equal(waiting, tc.waiting) || !slices.Equal(incomplete, tc.incomplete) {
			t.Errorf("%s: caller %q, waiting %v, incomplete %v; want %q, %v, %v", tc.name, caller, waiting, incomplete, tc.caller, tc.waiting, tc.incomplete)
		}
	}
}

// TestSliceDrainedNotReady: NotReady means the kubelet stopped
// heartbeating, not that the host's containers stopped. A NotReady host
// counts as drained when its own state says so, or once it has been
// NotReady for SliceNotReadyBound with its agent silent (it never took the
// slice's maintenance up); a NotReady host whose agent is draining is
// waited for, however long; until the bound, the caller is told when to
// look again.
func TestSliceDrainedNotReady(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	caller := protocol.SliceHost{Name: "a", Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: at, Deadline: at.Add(time.Hour), Ready: true}
	notReady := func(phase protocol.Phase, drain protocol.DrainEnd, since time.Duration) protocol.SliceHost {
		h := protocol.SliceHost{Name: "b", Phase: phase, Drain: drain, NotReadySince: at.Add(-since)}
		if phase != protocol.PhaseIdle {
			h.Reason, h.Started, h.Deadline = protocol.ReasonSlice, at, at.Add(time.Hour)
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		host    protocol.SliceHost
		waiting bool
		recheck time.Time
	}{
		{"NotReady a minute, its agent silent: waited for, looked at again at the bound", notReady(protocol.PhaseIdle, "", time.Minute), true, at.Add(SliceNotReadyBound - time.Minute)},
		{"NotReady past the bound, its agent silent: drained", notReady(protocol.PhaseIdle, "", SliceNotReadyBound), false, time.Time{}},
		{"NotReady past the bound, its agent draining: waited for", notReady(protocol.PhaseDraining, "", time.Hour), true, time.Time{}},
		{"NotReady, its drain done: drained", notReady(protocol.PhaseDraining, protocol.DrainDone, time.Second), false, time.Time{}},
		{"NotReady, terminating: drained", notReady(protocol.PhaseTerminating, "", time.Second), false, time.Time{}},
		{"NotReady since an unknown time: waited for", protocol.SliceHost{Name: "b", Phase: protocol.PhaseIdle}, true, time.Time{}},
	} {
		waiting, _, recheck := SliceDrained([]protocol.SliceHost{caller, tc.host}, "a", at)
		if (len(waiting) == 1) != tc.waiting || !recheck.Equal(tc.recheck) {
			t.Errorf("%s: waiting %v, recheck %s; want waiting %t, recheck %s", tc.name, waiting, recheck, tc.waiting, tc.recheck)
		}
	}
}

// TestSliceViewOf: the two rules of what a host knows of its slice that
// its own hosts' reading does not give: a host gone from the cluster keeps
// the slice down while the slice's maintenance holds this host, and a
// fault's repair of a slice's host (or a gang's node) waits for the other
// hosts as a call does, where a reservation group's member is repaired
// alone.
func TestSliceViewOf(t *testing.T) {
	deadline := t0.Add(time.Hour)
	slice := protocol.Group{Kind: protocol.GroupSlice, Name: "s1"}
	forSlice := State{Phase: protocol.PhaseTerminating, Reason: protocol.ReasonSlice, Started: t0, Deadline: deadline}
	inFault := State{Phase: protocol.PhaseDraining, Reason: protocol.ReasonFault, Started: t0, Deadline: deadline}
	me := protocol.SliceHost{Name: "h0", Phase: protocol.PhaseTerminating, Reason: protocol.ReasonSlice, Ready: true}
	draining := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseDraining, Reason: protocol.ReasonSlice, Started: t0, Deadline: deadline, Ready: true}
	idle := protocol.SliceHost{Name: "h1", Phase: protocol.PhaseIdle, Ready: true}

	v := SliceViewOf(SliceInput{Node: "h0", State: forSlice, Group: slice, Hosts: []protocol.SliceHost{me}, WantHosts: 2, Now: t0})
	if !v.SliceAskSet || v.SliceAsk.Cause != "(1 of its 2 hosts are in the cluster)" || !v.SliceAsk.Deadline.Equal(deadline) || v.Slice != "s1" {
		t.Errorf("a host gone: %+v; want the slice kept down by its own ask", v)
	}
	if v := SliceViewOf(SliceInput{Node: "h0", State: forSlice, Group: slice, Hosts: []protocol.SliceHost{me, idle}, WantHosts: 2, Now: t0}); v.SliceAskSet {
		t.Errorf("every host in the cluster and back: %+v; want no ask", v)
	}
	if v := SliceViewOf(SliceInput{Node: "h0", State: State{}, Group: slice, Hosts: []protocol.SliceHost{{Name: "h0", Ready: true}}, WantHosts: 2, Now: t0}); v.SliceAskSet {
		t.Errorf("a host gone, this one not in maintenance: %+v; want no ask", v)
	}
	me.Phase, me.Reason = protocol.PhaseDraining, protocol.ReasonFault
	v = SliceViewOf(SliceInput{Node: "h0", State: inFault, Group: slice, Hosts: []protocol.SliceHost{me, draining}, WantHosts: 2, Now: t0})
	if len(v.SliceWaiting) != 1 || v.SliceWaiting[0] != "h1" {
		t.Errorf("a slice host's repair: waiting %v; want it to wait for h1", v.SliceWaiting)
	}
	// A gang's: the report stops its job on every node, so it waits too.
	gang := protocol.Group{Kind: protocol.GroupGang, Name: "ml.train"}
	if v := SliceViewOf(SliceInput{Node: "h0", State: inFault, Group: gang, Hosts: []protocol.SliceHost{me, draining}, Now: t0}); len(v.SliceWaiting) != 1 {
		t.Errorf("a gang node's repair: waiting %v; want it to wait for h1", v.SliceWaiting)
	}
	// A reservation group's member, drained, beside an idle member: it
	// waits for no one (it waited for the idle member until its deadline
	// before).
	me.Drain = protocol.DrainDone
	group := protocol.Group{Kind: protocol.GroupReservation, Name: "b/s"}
	if v := SliceViewOf(SliceInput{Node: "h0", State: inFault, Group: group, Hosts: []protocol.SliceHost{me, idle}, WantHosts: 0, Now: t0}); len(v.SliceWaiting) != 0 {
		t.Errorf("a reservation group member's repair: waiting %v; want it repaired alone", v.SliceWaiting)
	}
}
