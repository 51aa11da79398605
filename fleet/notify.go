package fleet

// What people are told: a node's maintenance seen from its Node, as steps
// a person follows (scheduled, draining, in maintenance, back, failed).
// The aggregator's notifier sends one message per step, in the order the
// Node went through them.

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Step is one step of a node's maintenance, as people are told.
type Step string

const (
	// StepScheduled: Compute Engine scheduled a maintenance (or moved it),
	// or the VM's known end is set.
	StepScheduled Step = "scheduled"
	// StepDraining: the node's drain began.
	StepDraining Step = "draining"
	// StepInMaintenance: every pod the drain stops is gone; the VM stops
	// (or is being repaired).
	StepInMaintenance Step = "in-maintenance"
	// StepBack: the node is back in service.
	StepBack Step = "back"
	// StepFailed: a voluntary maintenance or a repair failed; the node is
	// back in service (a repair's stays drained).
	StepFailed Step = "failed"
)

// Steps lists them in the order a maintenance goes through them.
var Steps = []Step{StepScheduled, StepDraining, StepInMaintenance, StepBack, StepFailed}

// Notification is one step of one node, as told.
type Notification struct {
	// Node is the node's name ("" for a message of its group).
	Node string `json:"node,omitempty"`
	Pool string `json:"pool,omitempty"`
	// Group names the node's multi-host slice or reservation group.
	Group string `json:"group,omitempty"`
	Step  Step   `json:"step"`
	// Reason is the maintenance's (protocol.Reason), or the failure's
	// outcome.
	Reason string `json:"reason,omitempty"`
	// When is the step's time: the window's start (scheduled), the
	// deadline (draining, in maintenance), or when it was seen.
	When    time.Time `json:"when"`
	Message string    `json:"message"`
	// ObserveOnly: the node is observed only, and this step was decided,
	// not taken.
	ObserveOnly bool `json:"observeOnly,omitempty"`
}

// NodeSteps is what people are told of the change of a Node from old to
// cur (old nil: it was just seen; nothing is told of a node first seen in
// a step), in the order it went through the steps; pool and group name
// it.
func NodeSteps(old, cur *corev1.Node, pool, group string, now time.Time) []Notification {
	if old == nil {
		return nil
	}
	was, is := protocol.ReadAgentState(old), protocol.ReadAgentState(cur)
	note := func(step Step, reason string, when time.Time, format string, args ...any) Notification {
		return Notification{Node: cur.Name, Pool: pool, Group: group, Step: step, Reason: reason, When: when.UTC(), Message: fmt.Sprintf(format, args...)}
	}
	var out []Notification
	if is.ScheduledTime != "" && is.ScheduledTime != was.ScheduledTime {
		out = append(out, note(StepScheduled, "", is.Notice.WindowStart, "Compute Engine scheduled a maintenance of %s for %s", cur.Name, is.Notice.WindowStart.UTC().Format(time.RFC3339)))
	}
	if !is.KnownEnd.IsZero() && !is.KnownEnd.Equal(was.KnownEnd) {
		out = append(out, note(StepScheduled, string(protocol.ReasonKnownEnd), is.KnownEnd, "%s's VM ends at %s (a time limit)", cur.Name, is.KnownEnd.UTC().Format(time.RFC3339)))
	}
	newMaintenance := is.Active() && (!was.Active() || !was.Started.Equal(is.Started))
	if newMaintenance {
		if was.Active() {
			out = append(out, ended(note, was, is, now)...)
		}
		out = append(out, note(StepDraining, string(is.Reason), is.Deadline, "%s drains for %s, by %s", cur.Name, is.Reason, is.Deadline.UTC().Format(time.RFC3339)))
	}
	if is.Phase == protocol.PhaseTerminating && (newMaintenance || was.Phase != protocol.PhaseTerminating) {
		out = append(out, note(StepInMaintenance, string(is.Reason), is.Deadline, "%s is drained; its VM stops for %s", cur.Name, is.Reason))
	}
	if was.Active() && !is.Active() {
		out = append(out, ended(note, was, is, now)...)
	}
	return out
}

// ended is what is told when the maintenance was under way ends: back,
// or failed (a voluntary maintenance's failure recorded, or a repair's).
func ended(note func(Step, string, time.Time, string, ...any) Notification, was, is protocol.AgentState, now time.Time) []Notification {
	switch {
	case is.Failures.Count > was.Failures.Count:
		return []Notification{note(StepFailed, is.Failures.Reason, now, "The %s maintenance failed (%s); the node is back in service", was.Reason, is.Failures.Reason)}
	case is.LastRepair != was.LastRepair && slices.Contains([]string{protocol.RepairFailed, protocol.RepairPermissionDenied, protocol.RepairRefused}, is.LastRepair.Outcome):
		return []Notification{note(StepFailed, is.LastRepair.Outcome, now, "The repair ended %s", is.LastRepair.Outcome)}
	}
	return []Notification{note(StepBack, string(was.Reason), now, "The node is back in service after %s", was.Reason)}
}

// Groups follows which hosts of each group (a multi-host slice or a
// reservation group) are in a maintenance, from the steps told of them,
// so that a group is told too: draining when its first host drains, back
// when its last host is back.
type Groups map[string]map[string]bool

// Step records x and returns what is told of x's group, if anything.
func (g Groups) Step(x Notification) []Notification {
	if x.Group == "" || x.Node == "" {
		return nil
	}
	hosts := g[x.Group]
	switch x.Step {
	case StepDraining:
		if hosts == nil {
			hosts = map[string]bool{}
			g[x.Group] = hosts
		}
		first := len(hosts) == 0
		hosts[x.Node] = true
		if first {
			return []Notification{{Group: x.Group, Pool: x.Pool, Step: StepDraining, Reason: x.Reason, When: x.When,
				Message: fmt.Sprintf("The group %s goes down: its host %s drains for %s", x.Group, x.Node, x.Reason)}}
		}
	case StepBack, StepFailed:
		if !hosts[x.Node] {
			return nil
		}
		delete(hosts, x.Node)
		if len(hosts) == 0 {
			delete(g, x.Group)
			return []Notification{{Group: x.Group, Pool: x.Pool, Step: StepBack, When: x.When,
				Message: fmt.Sprintf("The group %s is back in service: its last host %s is back", x.Group, x.Node)}}
		}
	}
	return nil
}

// Gone records that node's Node object was deleted (a host replaced, or
// removed by a scale-down): it is no longer one of group's hosts in
// maintenance. When it was the last, the group is told back, as when its
// last host comes back.
func (g Groups) Gone(node, group, pool string, when time.Time) []Notification {
	hosts := g[group]
	if group == "" || !hosts[node] {
		return nil
	}
	delete(hosts, node)
	if len(hosts) > 0 {
		return nil
	}
	delete(g, group)
	return []Notification{{Group: group, Pool: pool, Step: StepBack, When: when,
		Message: fmt.Sprintf("The group %s is back in service: its last host in maintenance, %s, was deleted", group, node)}}
}
