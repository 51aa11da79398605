package aggregator

// The aggregator's view of the Nodes: what a decision looks at of each
// Node (Node, NodeOf), kept per Node version so that a pass over 65,000
// Nodes reads again only those that changed.

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// cachedView is a Node's view, for the Node version rv.
type cachedView struct {
	obj  *corev1.Node // what node was read from, or a later object that differs in nothing decisive
	node Node
	pass uint64 // the last pass that saw the Node
}

// viewCache keeps each Node's view, so that a pass reads again only the
// Nodes that changed in what it reads (not a heartbeat), and reuses its
// slice of views from pass to pass: a pass over 65,000 nodes does work for
// what changed, not for the fleet. Used by the pass goroutine only.
type viewCache struct {
	views map[string]*cachedView
	objs  map[string]*corev1.Node
	pass  uint64
	buf   []Node
}

// refresh is the view of every Node in objs (what is not a Node is
// skipped), read with read where it changed, and the Node objects by name.
// Both are valid until the next refresh, and are not to be changed.
func (c *viewCache) refresh(objs []any, read func(*corev1.Node) Node) ([]Node, map[string]*corev1.Node) {
	if c.views == nil {
		c.views, c.objs = map[string]*cachedView{}, map[string]*corev1.Node{}
	}
	c.pass++
	views := c.buf[:0]
	for _, o := range objs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		v := c.views[n.Name]
		if v == nil {
			v = &cachedView{}
			c.views[n.Name] = v
		}
		switch {
		case v.obj != nil && v.obj.ResourceVersion == n.ResourceVersion:
			// A Node object is replaced, never changed, when its
			// resourceVersion changes: one that did not is the one held.
		case v.obj == nil || decisive(v.obj, n):
			v.obj, v.node = n, read(n)
			c.objs[n.Name] = n
		default:
			v.obj = n // a heartbeat: the view holds
			c.objs[n.Name] = n
		}
		v.pass = c.pass
		views = append(views, v.node)
	}
	for name, v := range c.views {
		if v.pass != c.pass {
			delete(c.views, name)
			delete(c.objs, name)
		}
	}
	c.buf = views
	return views, c.objs
}

// viewNodes is the view of every Node in the cache, and the Node objects
// it was read from, by name.
func (a *Aggregator) viewNodes() ([]Node, map[string]*corev1.Node) {
	return a.views.refresh(a.nodes.GetStore().List(), func(n *corev1.Node) Node {
		v := NodeOf(n, a.opts.PoolLabel, a.opts.SliceLabel)
		if a.opts.AdoptGKEConfig {
			v.GKEHandled = false
		}
		return v
	})
}

// Node is what a decision looks at, read from a Node object.
type Node struct {
	Name string
	UID  types.UID
	Pool string
	// Ready: the NodeReady condition is True.
	Ready bool
	// InMaintenance: a maintenance is under way or asked for (the
	// active-node-maintenance label, the perform-maintenance label, or the
	// impending-termination taint).
	InMaintenance bool
	// Triggered: the aggregator started its maintenance (an opportunistic
	// trigger), at TriggeredAt (zero when unreadable); Asked: the
	// perform-maintenance label is on the node.
	Triggered, Asked bool
	TriggeredAt      time.Time
	// Voluntary: a manual or opportunistic maintenance is under way or
	// asked for (it counts against the caps).
	Voluntary bool
	// Notice is the pending notice the agent mirrored, if any.
	Notice        metadata.Notice
	NoticePresent bool
	IdleSince     time.Time
	Busy          string
	OptOut        bool
	// Config is the node's opportunistic-config annotation.
	Config string
	// Failures are the node's voluntary maintenances that failed in a row.
	Failures protocol.Failures
	// GKEHandled: GKE's own maintenance handler runs on the node (its
	// kubelet is GKE's, 1.31 or later) and acts on the opportunistic-config
	// annotation itself; the aggregator leaves that annotation to it.
	GKEHandled bool
	// Slice names the multi-host TPU slice the node belongs to ("" for
	// none): its pool, when the topology spans more chips than one node has.
	Slice string
	// SliceHosts is how many hosts its slice has, by its topology (0 when
	// it cannot tell: protocol.SliceHosts).
	SliceHosts int
	// AutoscalerGroup is the cluster autoscaler's node group the node is
	// in ("" for none known): set by the pass from the autoscaler's status.
	AutoscalerGroup string
	// The agent's maintenance under way, if any.
	Phase             protocol.Phase
	Reason            protocol.Reason
	Started, Deadline time.Time
	// Ask is the slice ask on the node (nil for none), and SliceTaint
	// whether the slice-down taint is on it.
	Ask        *protocol.SliceAsk
	SliceTaint bool
	// Unreadable are the keys whose values could not be read
	// (protocol.Unreadable): they count as absent, and the node is not
	// picked while they last.
	Unreadable []string
}

// NodeOf reads n; poolLabel names its pool, and sliceLabel, when given,
// its multi-host slice (protocol.SliceOf).
func NodeOf(n *corev1.Node, poolLabel, sliceLabel string) Node {
	v := Node{
		Name:   n.Name,
		UID:    n.UID,
		Pool:   n.Labels[poolLabel],
		Config: strings.TrimSpace(n.Annotations[protocol.AnnotationOpportunisticConfig]),
		OptOut: n.Labels[protocol.LabelOpportunisticDisable] == "true",
	}
	st := protocol.ReadAgentState(n)
	v.Busy, v.IdleSince, v.Failures = st.Busy, st.IdleSince, st.Failures
	_, asked := n.Labels[protocol.LabelPerformMaintenance]
	v.Asked = asked
	v.Voluntary = asked || st.Active() && st.Reason == protocol.ReasonManual
	v.GKEHandled = lifecycle.GKEHandles(n.Status.NodeInfo.KubeletVersion)
	v.Ready = nodeReady(n)
	v.InMaintenance = protocol.InMaintenance(n)
	_, _, ms := protocol.ReadTrigger(n)
	v.Triggered = ms.OpportunisticTriggered
	v.TriggeredAt, _ = time.Parse(time.RFC3339, ms.TriggeredAt)
	if st.Notice != "" {
		if notice, present, err := metadata.ParseNotice(st.Notice); err == nil && present {
			v.Notice, v.NoticePresent = notice, true
		}
	}
	v.Slice = protocol.SliceOf(n, poolLabel, sliceLabel)
	if v.Slice != "" {
		v.SliceHosts = protocol.SliceHosts(n)
	}
	v.Phase, v.Reason, v.Started, v.Deadline = st.Phase, st.Reason, st.Started, st.Deadline
	if ask, ok := protocol.ReadSliceAsk(n); ok {
		v.Ask = &ask
	}
	v.SliceTaint = protocol.HasTaintKey(n, protocol.TaintSliceDown)
	v.Unreadable = protocol.Unreadable(n)
	return v
}

// decisive: cur differs from old in what a pass reads of a Node (its
// labels, annotations, taints, unschedulable, whether it is Ready, its
// allocatable and its kubelet's version). A heartbeat, which only moves a
// condition's times, wakes no pass: with thousands of Nodes heart-beating,
// passes would otherwise run back to back for nothing.
func decisive(old, cur *corev1.Node) bool {
	return old.UID != cur.UID || !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable || !slices.EqualFunc(old.Spec.Taints, cur.Spec.Taints, sameTaint) ||
		nodeReady(old) != nodeReady(cur) || !sameResources(old.Status.Allocatable, cur.Status.Allocatable) ||
		old.Status.NodeInfo.KubeletVersion != cur.Status.NodeInfo.KubeletVersion
}

func sameTaint(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

func sameResources(a, b corev1.ResourceList) bool {
	return maps.EqualFunc(a, b, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 })
}

// nodeReady: n's NodeReady condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
