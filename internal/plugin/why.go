package plugin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Why says, in one paragraph, why node n is or is not in maintenance, not
// picked, or rejected: from its keys and the project's recent Events.
func Why(in Input, n *corev1.Node) string {
	st := protocol.ReadAgentState(n)
	var parts []string
	say := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) + " (" + In(t, in.Now) + ")" }
	notice := st.Notice
	pending := notice.Status == maintenance.StatusPending
	switch {
	case st.Active():
		say("%s is in maintenance: %s for %s since %s, to be drained by %s.", n.Name, st.Phase, st.Reason, at(st.Started), at(st.Deadline))
		if ask, ok := protocol.ReadSliceAsk(n); ok && st.Reason == protocol.ReasonSlice {
			say("Host %s of its multi-host slice %s stops (%s); the slice is drained as one and comes back when every host that stopped is back.", ask.Cause, ask.Slice, ask.Reason)
		}
		if st.Phase == protocol.PhaseTerminating {
			say("Its pods are stopped; it waits for the VM to stop.")
		}
	case pending:
		say("%s has a maintenance scheduled for %s (can reschedule: %t), and is in service.", n.Name, at(notice.WindowStart), notice.CanReschedule)
	case notice.Raw != "":
		say("%s has a maintenance notice with status %s, and is in service.", n.Name, notice.RawStatus)
	default:
		say("%s has no maintenance scheduled (the metadata server reports no notice), and is in service.", n.Name)
	}
	var conds []string
	for _, c := range n.Status.Conditions {
		if slices.Contains(protocol.NodeConditionTypes, c.Type) && c.Status == corev1.ConditionTrue {
			conds = append(conds, fmt.Sprintf("%s (%s, since %s)", c.Type, c.Reason, at(c.LastTransitionTime.Time)))
		}
	}
	if len(conds) > 0 {
		say("Its node conditions: %s.", strings.Join(conds, ", "))
	}
	switch h := lifecycle.GKEHandling(n, st); {
	case st.LeftToGKE:
		say("The maintenance is left to GKE's own maintenance handler, seen handling the node (%s): the agent does not drain or cordon it or call Compute Engine, and counts the interruption (agent flag --gke-handler=defer).", orNone(h, "its keys since removed"))
	case h != "":
		say("GKE's own maintenance handler is handling the node (%s): a maintenance that starts now is left to it (agent flag --gke-handler=defer).", h)
	}
	if v, set := n.Labels[protocol.LabelPerformMaintenance]; set && !st.Active() {
		say("%s=%s is set and not answered yet by the node's agent (is it running?).", protocol.LabelPerformMaintenance, v)
	}
	whyFault(in, n, st, say, at)
	if f := st.Failures; f.Count > 0 {
		say("Its last %d voluntary maintenance(s) failed (%s, last at %s); the aggregator does not pick it before %s.", f.Count, f.Reason, at(f.Last), at(f.RetryAfter))
	}
	if e := lastEvent(in.Events, n.Name, protocol.EventSourceAggregator); e != nil && !st.Active() && pending {
		say("The aggregator's last word (%s, %s): %s", e.Reason, In(eventTime(e), in.Now), e.Message)
	}
	if e := lastEvent(in.Events, n.Name, protocol.EventSourceAgent); e != nil {
		// A refused trigger, or a pod's lead that was ignored, is worth
		// saying; the lifecycle Events are what the keys above say.
		if protocol.IsTriggerRefusal(e.Reason) || e.Reason == protocol.EventCheckpointLeadInvalid {
			say("The agent's last word (%s, %s): %s", e.Reason, In(eventTime(e), in.Now), e.Message)
		}
	}
	if in.Observed[n.Name] {
		parts = append([]string{"Observe-only: what follows was decided and not done; nothing on the node was changed."}, parts...)
	}
	return strings.Join(parts, " ")
}

// orNone is s, or none when s is empty.
func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// whyFault says whether n is faulty and where its repair stands, as the
// aggregator decides it, and how its last repair ended.
func whyFault(in Input, n *corev1.Node, st protocol.AgentState, say func(string, ...any), at func(time.Time) string) {
	views := make([]fleet.Node, 0, len(in.Nodes))
	for _, m := range in.Nodes {
		views = append(views, fleet.NodeOf(m, in.grouping()))
	}
	for _, f := range faultStatus(in.Now, in.Config, views, func(name string) bool { return name == n.Name }) {
		switch {
		case f.State == "in repair":
			say("It is faulty (%s, seen by %s: %s), and its repair is under way (%d of %d of its pool's nodes in repair).", f.Behavior, f.Source, f.Signal, f.InRepair, f.MaxInRepair)
		case f.State == string(fleet.FaultInvalidRequest):
			say("Its %s label names no fault behavior; the aggregator removes it.", protocol.LabelReportFaulty)
		default:
			say("It is faulty (%s, seen by %s: %s), tainted %s; its repair: %s (%d of %d of its pool's nodes in repair).", f.Behavior, f.Source, f.Signal, protocol.TaintFaulty, f.State, f.InRepair, f.MaxInRepair)
		}
	}
	if r := st.LastRepair; r.Outcome != "" {
		say("Its last repair after a fault ended %s at %s.", r.Outcome, at(r.Ended))
	}
}

// FaultPreview says what reporting node faulty with behavior (and
// description) would do now: whether the aggregator would approve its
// repair at once or why it would wait, and how the agent would ask
// Compute Engine.
func FaultPreview(in Input, node, behavior, description string) string {
	views := make([]fleet.Node, 0, len(in.Nodes))
	var n *corev1.Node
	for _, m := range in.Nodes {
		v := fleet.NodeOf(m, in.grouping())
		if m.Name == node {
			n = m
			v.ReportFaulty, v.ReportFaultySet, v.ReportDescription = behavior, true, description
		}
		views = append(views, v)
	}
	if n == nil {
		return fmt.Sprintf("Node %s not found.", node)
	}
	st := protocol.ReadAgentState(n)
	var parts []string
	for _, f := range faultStatus(in.Now, in.Config, views, func(name string) bool { return name == node }) {
		switch f.State {
		case "in repair":
			parts = append(parts, fmt.Sprintf("%s is already in repair (%s, seen by %s); the label would be removed as answered.", node, f.Behavior, f.Source))
		case "approved at the next pass":
			parts = append(parts, fmt.Sprintf("The aggregator would taint %s %s and approve its repair at once (%d of %d of the pool's nodes in repair now): its agent drains it, by %s, then asks Compute Engine.",
				node, protocol.TaintFaulty, f.InRepair, f.MaxInRepair, in.Config.Faults(f.Pool).DrainTimeout))
		default:
			parts = append(parts, fmt.Sprintf("The aggregator would taint %s %s at once; its repair would wait: %s (%d of %d of the pool's nodes in repair now).",
				node, protocol.TaintFaulty, f.State, f.InRepair, f.MaxInRepair))
		}
	}
	how := "report its host with reportHostAsFaulty (" + behavior + ")"
	if n := st.Notice; n.Status == maintenance.StatusPending && n.CanReschedule && lifecycle.BookedRepair(n) {
		how = fmt.Sprintf("pull the repair Compute Engine booked (%s, window %s) forward with performMaintenance", strings.Join(n.Reasons, ", "), n.WindowStart.UTC().Format(time.RFC3339))
	}
	parts = append(parts, "Drained, the agent would "+how+".")
	return strings.Join(parts, " ")
}
