package lifecycle

// A multi-host TPU slice is one machine: its job runs on every host, and
// when one host stops the whole job fails. So a slice is maintained as one
// unit: when one host begins a maintenance (or is preempted), every other
// host drains with it, by the earliest deadline (SliceAsks: the aggregator
// writes it; each host's agent works a voluntary one out from its slice's
// Nodes too, and a forced one only once the aggregator confirmed it:
// confirm.go), and the slice returns to service when
// every host is back. A voluntary maintenance of a slice asks Compute
// Engine once, from one host (SliceCaller), once every other host is
// drained (SliceDrained).

import (
	"fmt"
	"sort"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// SliceDrainLimit bounds how long a host drains for its slice: an ask
// whose cause started longer ago is no longer followed, and the host goes
// back in service even though a host of its slice is still down (its VM
// not back, or its Node deleted and not recreated). A day: a slice whose
// host is away that long is repaired or recreated by other means, and its
// other hosts should not stay cordoned for ever.
const SliceDrainLimit = 24 * time.Hour

// active: the host has a maintenance under way.
func active(h protocol.SliceHost) bool {
	return h.Phase == protocol.PhaseDraining || h.Phase == protocol.PhaseTerminating
}

// ClockSkew is how far in the future a host's own clock may put the start
// of its maintenance and still be believed (Believed).
const ClockSkew = time.Minute

// Believed says whether h's own maintenance may take the other hosts of
// its group with it, as of now: not where h's membership is unproven
// (protocol.Grouping.Unproven: labels and capacity its kubelet wrote, with
// no fact of Compute Engine's behind them), nor where h says its
// maintenance started in the future, which would keep its group drained
// for as long as it likes (SliceDrainLimit counts from the start). A
// node's word moves no other node further than it reaches: an unbelieved
// host still drains itself, and still follows its group.
func Believed(h protocol.SliceHost, now time.Time) bool {
	return !h.Unproven && !h.Started.After(now.Add(ClockSkew))
}

// SliceCaller names the host of a slice that asks Compute Engine for the
// slice's voluntary maintenance ("" for none): of the hosts with a manual
// (or opportunistic) maintenance under way, the first to start it (the
// first by name on a tie), a proven member asked for by someone who is not
// the node before any other.
// Starting maintenance on one instance of a multi-host TPU slice starts
// it on every instance, so a slice makes one call, whichever hosts a
// person asked; the others drain and wait. An unproven caller, or one
// nobody asked, is no cause (Believed, causes): nobody drains for it, so
// its call waits for hosts that never drain, and is given up at its
// deadline.
func SliceCaller(hosts []protocol.SliceHost) string {
	var caller *protocol.SliceHost
	for i, h := range hosts {
		if !active(h) || h.Reason != protocol.ReasonManual {
			continue
		}
		if caller == nil || weak(*caller) && !weak(h) ||
			weak(*caller) == weak(h) && (h.Started.Before(caller.Started) || h.Started.Equal(caller.Started) && h.Name < caller.Name) {
			caller = &hosts[i]
		}
	}
	if caller == nil {
		return ""
	}
	return caller.Name
}

// weak: h's manual maintenance moves no other host (unproven, or not
// asked for by anyone but the node), so it calls only where no other does.
func weak(h protocol.SliceHost) bool { return h.Unproven || !h.Asked }

// SliceNotReadyBound is how long a host of a slice must have been
// NotReady, its agent silent, before the caller of the slice's voluntary
// maintenance counts it as drained (SliceDrained). NotReady means the
// kubelet stopped heartbeating (a restart, a partition), not that its
// containers stopped: its pods may be mid-grace. Ten minutes is longer than
// the node lifecycle controller's grace (50 s) and the 5-minute
// not-ready toleration after which Kubernetes itself evicts the node's
// pods, plus their default grace of 30 s.
const SliceNotReadyBound = 10 * time.Minute

// SliceDrained says, for the slice's voluntary maintenance, which hosts
// other than caller still drain (waiting) and whose voluntary drain
// ended with pods still on them (incomplete), as of now. A host drained
// (Terminating, or its drain done) is ready, Ready or not. A NotReady host
// whose state says nothing of the kind is ready only once it has been
// NotReady for SliceNotReadyBound with its agent silent (it never took the
// slice's maintenance up: no drain under way); recheck is when the next
// such host will be (zero for none). A NotReady host whose agent took the
// maintenance up is waited for: its own state will say.
func SliceDrained(hosts []protocol.SliceHost, caller string, now time.Time) (waiting, incomplete []string, recheck time.Time) {
	for _, h := range hosts {
		switch {
		case h.Name == caller:
		case active(h) && h.Drain == protocol.DrainIncomplete:
			incomplete = append(incomplete, h.Name)
		case h.Phase == protocol.PhaseTerminating || active(h) && h.Drain == protocol.DrainDone:
		case !h.Ready && !active(h) && !h.NotReadySince.IsZero() && !now.Before(h.NotReadySince.Add(SliceNotReadyBound)):
		default:
			waiting = append(waiting, h.Name)
			if at := h.NotReadySince.Add(SliceNotReadyBound); !h.Ready && !active(h) && !h.NotReadySince.IsZero() && (recheck.IsZero() || at.Before(recheck)) {
				recheck = at
			}
		}
	}
	sort.Strings(waiting)
	sort.Strings(incomplete)
	return waiting, incomplete, recheck
}

// SliceAsks is what every host of one group must carry, by host name (nil:
// no ask). In a multi-host slice (protocol.GroupSlice), when a host is in
// a maintenance of its own (host maintenance, preemption, a fault's
// repair, a known end, or a manual or opportunistic one; not a drain with
// its slice), every other host drains with it, by the earliest deadline
// of those hosts; the host with that deadline (the first by name on a tie)
// is the cause. In a reservation group (protocol.GroupReservation) only a
// voluntary maintenance (manual or opportunistic) is a cause: a member's
// own forced event stops that member alone. Only a host Believed at now is
// a cause, and only where someone not the node asked for its voluntary
// maintenance, or the aggregator confirmed its forced one (causes). The aggregator writes these asks on every host; each host's
// agent works its own out from the same Nodes, so that a slice needs no
// aggregator to go down as one.
func SliceAsks(slice string, kind protocol.GroupKind, hosts []protocol.SliceHost, now time.Time) map[string]*protocol.SliceAsk {
	var cause *protocol.SliceHost
	for i, h := range hosts {
		if !causes(kind, h, now) || !Believed(h, now) {
			continue
		}
		if cause == nil || h.Deadline.Before(cause.Deadline) || h.Deadline.Equal(cause.Deadline) && h.Name < cause.Name {
			cause = &hosts[i]
		}
	}
	out := make(map[string]*protocol.SliceAsk, len(hosts))
	for _, h := range hosts {
		out[h.Name] = nil
		if cause != nil && h.Name != cause.Name {
			out[h.Name] = &protocol.SliceAsk{Slice: slice, Cause: cause.Name, Reason: cause.Reason, Started: cause.Started.UTC(), Deadline: cause.Deadline.UTC()}
		}
	}
	return out
}

// causes says whether h's maintenance takes the other hosts of its group
// (of kind) with it at now: one of its own, under way with a deadline; in
// a reservation group, a voluntary one only. A voluntary one moves the
// others only where someone who is not the node asked for it (Asked, not
// past AskedUntil), a forced one (preemption, host maintenance, a known
// end, a repair) only where the aggregator confirmed it from what the node
// cannot write (Confirmed: ConfirmsCause): a node's own word that it is in
// a maintenance drains itself alone, in every kind of group.
func causes(kind protocol.GroupKind, h protocol.SliceHost, now time.Time) bool {
	own := active(h) && h.Reason != protocol.ReasonSlice && !h.Deadline.IsZero()
	if h.Reason == protocol.ReasonManual && !askedAt(h, now) || h.Reason != protocol.ReasonManual && !h.Confirmed {
		return false
	}
	return own && (kind != protocol.GroupReservation || h.Reason == protocol.ReasonManual)
}

// askedAt: someone who is not the node asked for h's manual maintenance,
// and that still holds at now.
func askedAt(h protocol.SliceHost, now time.Time) bool {
	return h.Asked && (h.AskedUntil.IsZero() || now.Before(h.AskedUntil))
}

// SliceSignal is what of host h another host of its slice acts on: a
// maintenance of its own (which makes it a cause), whether its drain is
// over (which the caller of a voluntary maintenance waits for: drained or
// incomplete), and whether its Node is Ready. A host that starts to drain
// for its slice changes none of it, so the hosts of a 64-host slice that
// follow one host do not wake each other 63 times each.
func SliceSignal(h protocol.SliceHost) protocol.SliceHost {
	if h.Phase == protocol.PhaseIdle || h.Reason == protocol.ReasonSlice {
		h.Reason, h.Started, h.Deadline, h.Asked, h.AskedUntil, h.Confirmed = "", time.Time{}, time.Time{}, false, time.Time{}, false
		if h.Phase != protocol.PhaseTerminating {
			h.Phase = ""
		}
	}
	return h
}

// FollowedAsk is the ask a host follows: its own reading of its group's
// hosts (own, nil for none) or the aggregator's (written, when set), the
// earlier deadline of the two. The aggregator's is stale, and ignored,
// once its cause is among hosts with no maintenance of its own started
// then under way: the aggregator withdraws it on its next pass, or never
// while none leads. In a reservation group (kind), an ask for anything but
// a voluntary maintenance is no ask: a member's forced event is its own.
func FollowedAsk(own *protocol.SliceAsk, written protocol.SliceAsk, set bool, kind protocol.GroupKind, hosts []protocol.SliceHost) (protocol.SliceAsk, bool) {
	if set && kind == protocol.GroupReservation && written.Reason != protocol.ReasonManual {
		set = false
	}
	if set {
		for _, h := range hosts {
			if h.Name != written.Cause {
				continue
			}
			active := (h.Phase == protocol.PhaseDraining || h.Phase == protocol.PhaseTerminating) && h.Reason != protocol.ReasonSlice
			if !active || !h.Started.Equal(written.Started) || h.Reason == protocol.ReasonManual && !h.Asked {
				set = false
			}
		}
	}
	switch {
	case own != nil && (!set || own.Deadline.Before(written.Deadline)):
		return *own, true
	case set:
		return written, true
	}
	return protocol.SliceAsk{}, false
}

// SliceInput is what the agent read of its node's multi-host slice or
// reservation group: the group, the node's state on its Node, the hosts
// listed (Hosts; the node among them), how many the slice has (WantHosts,
// 0 where unknown), the aggregator's ask written on the Node, and why the
// slice cannot be told yet (Unknown, "" when it can).
type SliceInput struct {
	Node       string
	State      State
	Group      protocol.Group
	Hosts      []protocol.SliceHost
	WantHosts  int
	Written    protocol.SliceAsk
	WrittenSet bool
	Unknown    string
	Now        time.Time
}

// SliceViewOf is what a step knows of the node's slice or group: the ask
// it follows (its own reading of the hosts, or the aggregator's: FollowedAsk;
// while a slice's maintenance holds it, a host gone from the cluster, as
// a repair deletes a Node before it recreates it, keeps the slice down),
// and, for a voluntary maintenance, which host calls Compute Engine and
// which still drain (a fault's repair of a slice's host stops the slice,
// and a gang node's its job, so it waits for the others as a call does; a
// reservation group's member is repaired alone).
func SliceViewOf(in SliceInput) SliceView {
	v := SliceView{Slice: in.Group.Name, SliceUnknown: in.Unknown}
	v.SliceAsk, v.SliceAskSet = FollowedAsk(SliceAsks(in.Group.Name, in.Group.Kind, in.Hosts, in.Now)[in.Node], in.Written, in.WrittenSet, in.Group.Kind, in.Hosts)
	st := in.State
	proven := 0 // a node labelled in fills no host's place
	for _, h := range in.Hosts {
		if !h.Unproven {
			proven++
		}
	}
	if !v.SliceAskSet && st.Active() && st.Reason == protocol.ReasonSlice && proven < in.WantHosts {
		v.SliceAsk, v.SliceAskSet = protocol.SliceAsk{Slice: in.Group.Name, Cause: fmt.Sprintf("(%d of its %d hosts are in the cluster)", proven, in.WantHosts),
			Reason: protocol.ReasonSlice, Started: st.Started, Deadline: st.Deadline}, true
	}
	caller := SliceCaller(in.Hosts)
	v.SliceVoluntary, v.SliceCaller = caller != "", caller == in.Node
	if caller == "" && st.Active() && st.Reason == protocol.ReasonFault && in.Group.Kind != protocol.GroupReservation {
		caller = in.Node
	}
	if caller != "" { // no call to wait for: nothing waits (a member repaired alone)
		v.SliceWaiting, v.SliceIncomplete, v.SliceRecheck = SliceDrained(in.Hosts, caller, in.Now)
	}
	return v
}
