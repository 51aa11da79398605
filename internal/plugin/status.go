// Package plugin is kubectl-gce_maintenance's logic: what it shows of the
// fleet's maintenance, read from the Node protocol and the Events, as pure
// functions of what it read (cmd/kubectl-gce_maintenance reads it).
package plugin

import (
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Input is what the plugin read from the cluster.
type Input struct {
	Now time.Time
	// Nodes are every node (pools are whole), Shown the names to show
	// (nil: all).
	Nodes []*corev1.Node
	Shown map[string]bool
	// Events are the project's Events about the nodes.
	Events []corev1.Event
	// Pods are the pods bound to the nodes.
	Pods []*corev1.Pod
	// Config is the policy ConfigMap's (zero when none), ConfigErr why it
	// cannot be used.
	Config    policy.Config
	ConfigErr error
	// PolicySource names where Config was read ("ConfigMap ns/name").
	PolicySource string
	PoolLabel    string
	SliceLabel   string
	// ReservationGroups is the aggregator's --reservation-groups.
	ReservationGroups string
	// Observed names the nodes observed only: what they show is what their
	// agents decided and did not write.
	Observed map[string]bool
}

// grouping is what makes a node's group, as the aggregator reads it.
func (in Input) grouping() protocol.Grouping {
	return protocol.Grouping{PoolLabel: in.PoolLabel, SliceLabel: in.SliceLabel, Reservation: in.ReservationGroups}
}

// NodeStatus is one node's line.
type NodeStatus struct {
	Node string `json:"node"`
	Pool string `json:"pool"`
	// WindowStart is the pending or open maintenance's window start;
	// WindowOpen is true once the window has opened (the notice is
	// ONGOING: the VM may stop until WindowEnd, when the platform gives it).
	WindowStart *time.Time `json:"windowStart,omitempty"`
	WindowOpen  bool       `json:"windowOpen,omitempty"`
	WindowEnd   *time.Time `json:"windowEnd,omitempty"`
	Phase       string     `json:"phase"`
	Reason      string     `json:"reason,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	// PodsLeft are the pods the drain has still to stop while the node
	// drains (not the agent's own, mirror or finished pods, which it never
	// stops).
	PodsLeft int `json:"podsLeft"`
	// IdleSince, or Busy: why the node is not idle.
	IdleSince *time.Time `json:"idleSince,omitempty"`
	Busy      string     `json:"busy,omitempty"`
	// Decision is the aggregator's last Event about the node (its reason
	// and message).
	Decision      string         `json:"decision,omitempty"`
	DecisionWhy   string         `json:"decisionMessage,omitempty"`
	Interruptions map[string]int `json:"interruptions,omitempty"`
	// Conditions are the node lifecycle conditions its agent keeps
	// (protocol.NodeConditionTypes), by type: True or False.
	Conditions map[string]string `json:"conditions,omitempty"`
	// Unreadable are the keys whose values cannot be read
	// (protocol.Unreadable): they count as absent in the rest.
	Unreadable []string `json:"unreadable,omitempty"`
}

// PoolStatus is one pool's line.
type PoolStatus struct {
	Pool          string `json:"pool"`
	Nodes         int    `json:"nodes"`
	Pending       int    `json:"pending"`
	InMaintenance int    `json:"inMaintenance"`
	// Voluntary are the pool's nodes in voluntary (manual or
	// opportunistic) maintenance, which Cap bounds.
	Voluntary  int        `json:"voluntary"`
	Cap        int        `json:"cap"`
	MinNodes   *int       `json:"minNodes,omitempty"`
	NextWindow *time.Time `json:"nextWindow,omitempty"`
	// Config: "none", "valid" or the error.
	Config string `json:"config"`
}

// ClusterStatus is the cluster's cap on voluntary maintenance, which the
// pools share.
type ClusterStatus struct {
	Nodes     int `json:"nodes"`
	Voluntary int `json:"voluntary"`
	Cap       int `json:"cap"`
}

// SliceStatus is one multi-host slice's line: its hosts go down and come
// back together, so the table shows them as one.
type SliceStatus struct {
	Slice string   `json:"slice"`
	Pool  string   `json:"pool"`
	Hosts []string `json:"hosts"`
	// Size is how many hosts its topology holds (0: unknown); fewer Hosts
	// means a host's Node is gone.
	Size int `json:"size,omitempty"`
	// Phases counts the hosts by phase.
	Phases map[string]int `json:"phases"`
	// Cause is the host whose maintenance takes the slice down, and
	// Reason that maintenance's ("" while it is in service); Deadline
	// the slice's.
	Cause    string     `json:"cause,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
	// WindowStart is the earliest pending window of its hosts.
	WindowStart *time.Time `json:"windowStart,omitempty"`
	PodsLeft    int        `json:"podsLeft"`
	// Reservation, for a reservation group the aggregator reads, is what
	// Compute Engine last said of it (protocol.ReservationGroupState).
	Reservation *protocol.ReservationGroupState `json:"reservation,omitempty"`
}

// Status is the fleet at a glance. Nodes has every shown node, the hosts
// of multi-host slices too; the table shows those as their Slices' lines.
type Status struct {
	Nodes  []NodeStatus  `json:"nodes"`
	Slices []SliceStatus `json:"slices,omitempty"`
	// Faults are the shown nodes that are faulty or in repair.
	Faults  []FaultStatus `json:"faults,omitempty"`
	Pools   []PoolStatus  `json:"pools"`
	Cluster ClusterStatus `json:"cluster"`
}

// FaultStatus is one faulty node's line: what says it is faulty, and
// where its repair stands.
type FaultStatus struct {
	Node     string `json:"node"`
	Pool     string `json:"pool"`
	Behavior string `json:"behavior"`
	Source   string `json:"source"`
	Signal   string `json:"signal,omitempty"`
	// State is "in repair" (approved, or under way on its agent: Phase
	// says how far), or the aggregator's reason it waits
	// (fleet.FaultReason).
	State string `json:"state"`
	Phase string `json:"phase,omitempty"`
	// InRepair and MaxInRepair are its pool's nodes in repair and cap.
	InRepair    int `json:"inRepair"`
	MaxInRepair int `json:"maxInRepair"`
}

// faultStatus is the fault lines of views, as the aggregator decides
// about them at now; show says which nodes to show.
func faultStatus(now time.Time, cfg policy.Config, views []fleet.Node, show func(string) bool) []FaultStatus {
	plan := fleet.DecideFaults(now, cfg, views)
	pools := map[string]int{}
	for _, v := range views {
		pools[v.Pool]++
	}
	line := func(v fleet.Node, r protocol.RepairApproval, state string) FaultStatus {
		return FaultStatus{Node: v.Name, Pool: v.Pool, Behavior: r.Behavior, Source: r.Source, Signal: r.Signal, State: state,
			InRepair: plan.InRepair[v.Pool], MaxInRepair: cfg.Faults(v.Pool).MaxInRepair.Of(pools[v.Pool])}
	}
	var out []FaultStatus
	for _, v := range views {
		if !show(v.Name) || !v.InRepair() {
			continue
		}
		var r protocol.RepairApproval
		if v.Repair != nil {
			r = *v.Repair
		}
		fs := line(v, r, "in repair")
		fs.Phase = string(v.Phase)
		out = append(out, fs)
	}
	byName := map[string]fleet.Node{}
	for _, v := range views {
		byName[v.Name] = v
	}
	for _, f := range plan.Faults {
		if !show(f.Node) {
			continue
		}
		state := string(f.Reason)
		if f.Reason == fleet.FaultApproved {
			state = "approved at the next pass"
		}
		out = append(out, line(byName[f.Node], f.Approval, state))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// BuildStatus is the status of in's nodes and of their pools.
func BuildStatus(in Input) Status {
	views := make([]fleet.Node, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		views = append(views, fleet.NodeOf(n, in.grouping()))
	}
	cfg := in.Config
	plans := fleet.Decide(in.Now, cfg, views)
	shownPools := map[string]bool{}
	var st Status
	st.Cluster = ClusterStatus{Nodes: len(views), Cap: cfg.ClusterBudget().Of(len(views))}
	for _, p := range plans {
		st.Cluster.Voluntary += p.Voluntary
	}
	slices := map[string]*SliceStatus{}
	// The plugin confirms no forced maintenance from Compute Engine: the
	// aggregator's asks standing on the Nodes say which it confirmed.
	asks := fleet.SliceAsks(views, in.Now, func(string, protocol.Reason, time.Time) bool { return false })
	for i, n := range in.Nodes {
		if in.Shown != nil && !in.Shown[n.Name] {
			continue
		}
		ns := nodeStatus(in, n)
		shownPools[ns.Pool] = true
		st.Nodes = append(st.Nodes, ns)
		if v := views[i]; v.Slice != "" {
			ss := slices[v.Slice]
			if ss == nil {
				ss = &SliceStatus{Slice: v.Slice, Pool: v.Pool, Size: v.SliceHosts, Phases: map[string]int{}}
				slices[v.Slice] = ss
			}
			ss.add(ns, asks[v.Name])
			if rg, ok := protocol.ReadReservationGroup(n); ok {
				ss.Reservation = &rg
			}
		}
	}
	sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].Node < st.Nodes[j].Node })
	for _, ss := range slices {
		sort.Strings(ss.Hosts)
		st.Slices = append(st.Slices, *ss)
	}
	sort.Slice(st.Slices, func(i, j int) bool { return st.Slices[i].Slice < st.Slices[j].Slice })
	st.Faults = faultStatus(in.Now, cfg, views, func(name string) bool { return in.Shown == nil || in.Shown[name] })
	for _, p := range plans {
		if !shownPools[p.Pool] {
			continue
		}
		ps := PoolStatus{Pool: p.Pool, Nodes: p.Nodes, Pending: p.Pending, InMaintenance: p.InMaintenance, Voluntary: p.Voluntary,
			Cap: p.Budget.Of(p.Nodes), Config: "none"}
		if !p.NextMaintenance.IsZero() {
			t := p.NextMaintenance
			ps.NextWindow = &t
		}
		switch {
		case in.ConfigErr != nil:
			ps.Config = "invalid: " + in.ConfigErr.Error()
		case p.ConfigErr != nil:
			ps.Config = "invalid: " + p.ConfigErr.Error()
		case p.Configured:
			ps.Config = "valid"
			m := p.Setting.MinNodes
			ps.MinNodes = &m
		}
		st.Pools = append(st.Pools, ps)
	}
	return st
}

// add counts host ns, asked ask (nil: none), into its slice's line.
func (ss *SliceStatus) add(ns NodeStatus, ask *protocol.SliceAsk) {
	ss.Hosts = append(ss.Hosts, ns.Node)
	ss.Phases[ns.Phase]++
	ss.PodsLeft += ns.PodsLeft
	if ns.WindowStart != nil && !ns.WindowOpen && (ss.WindowStart == nil || ns.WindowStart.Before(*ss.WindowStart)) {
		ss.WindowStart = ns.WindowStart
	}
	switch {
	case ask != nil:
		ss.Cause, ss.Reason = ask.Cause, string(ask.Reason)
		d := ask.Deadline
		ss.Deadline = &d
	case ns.Phase != string(protocol.PhaseIdle) && ns.Reason != string(protocol.ReasonSlice) && ss.Cause == "":
		// The cause itself carries no ask.
		ss.Cause, ss.Reason, ss.Deadline = ns.Node, ns.Reason, ns.Deadline
	}
}

func nodeStatus(in Input, n *corev1.Node) NodeStatus {
	a := protocol.ReadAgentState(n)
	ns := NodeStatus{Node: n.Name, Pool: n.Labels[in.PoolLabel], Phase: string(a.Phase), Reason: string(a.Reason), Busy: a.Busy}
	if notice := a.Notice; notice.Status == maintenance.StatusPending || notice.Status == maintenance.StatusOngoing {
		t := notice.WindowStart
		ns.WindowStart = &t
		ns.WindowOpen = notice.Status == maintenance.StatusOngoing
		if ns.WindowOpen && !notice.WindowEnd.IsZero() {
			end := notice.WindowEnd
			ns.WindowEnd = &end
		}
	}
	if a.Active() {
		d := a.Deadline
		ns.Deadline = &d
		var on []*corev1.Pod
		for _, p := range in.Pods {
			if p.Spec.NodeName == n.Name {
				on = append(on, p)
			}
		}
		ns.PodsLeft = len(DrainPlan(on, nil, in.Now))
	}
	if !a.IdleSince.IsZero() {
		t := a.IdleSince
		ns.IdleSince = &t
	}
	if e := lastEvent(in.Events, n.Name, protocol.EventSourceAggregator); e != nil {
		ns.Decision, ns.DecisionWhy = e.Reason, e.Message
	}
	for _, c := range n.Status.Conditions {
		if slices.Contains(protocol.NodeConditionTypes, c.Type) {
			if ns.Conditions == nil {
				ns.Conditions = map[string]string{}
			}
			ns.Conditions[string(c.Type)] = string(c.Status)
		}
	}
	counts := protocol.NodeInterruptions(n)
	if len(counts) > 0 {
		ns.Interruptions = map[string]int(counts)
	}
	ns.Unreadable = protocol.Unreadable(n)
	return ns
}

// lastEvent is the latest Event about node from source (nil: none). An
// agent's Event is its node's word only when that node reported it
// (IsNodesWord).
func lastEvent(events []corev1.Event, node, source string) *corev1.Event {
	var last *corev1.Event
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != node || e.Source.Component != source ||
			source == protocol.EventSourceAgent && !IsNodesWord(e, node) {
			continue
		}
		if last == nil || eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	return last
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// In says how far t is from now, as "in 3d4h" or "5m ago".
func In(t, now time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		return short(-d) + " ago"
	}
	return "in " + short(d)
}

// IsNodesWord: e, an Event of the agent's, was reported from node itself
// (its source host), as an agent's token may write only then; another
// node's agent, or anyone else, speaking of node is not its word.
func IsNodesWord(e *corev1.Event, node string) bool {
	return e.Source.Host == node
}
