package aggregator

// The aggregator's view of the Nodes: what a decision looks at of each
// Node (Node, NodeOf), kept per Node version so that a pass over 65,000
// Nodes reads again only those that changed.

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// viewCache keeps the fleet (fleet.Fleet: each Node's view, by pool, with
// each pool's last plan) and the Node objects the views were read from.
// The node cache's handlers mark the Nodes that came, changed or went
// (mark); a pass reads again only those, and of those only the ones that
// changed in what it reads (not a heartbeat): a pass over 65,000 nodes
// does work for what changed, not for the fleet. The fleet and the
// objects are the pass goroutine's; marks come from the node cache's.
type viewCache struct {
	fleet  *fleet.Fleet
	objs   map[string]*corev1.Node
	groups []string // the autoscaler's node groups the views were read with

	mu    sync.Mutex
	dirty map[string]bool
	all   bool // every Node is read again: a new leader's first pass
	// marked is closed at the next mark (nil: none is waited for).
	marked chan struct{}
}

// mark: the Node name came, changed or went.
func (c *viewCache) mark(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty == nil {
		c.dirty = map[string]bool{}
	}
	c.dirty[name] = true
	if c.marked != nil {
		close(c.marked)
		c.marked = nil
	}
}

// nextMark is closed when a Node next comes, changes or goes.
func (c *viewCache) nextMark() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marked == nil {
		c.marked = make(chan struct{})
	}
	return c.marked
}

// awaitMarked waits until every one of names is marked, not yet read
// again, and shown (a mark comes after the node cache has the object
// that caused it).
func (c *viewCache) awaitMarked(names []string, shown func(name string) bool) {
	for {
		next := c.nextMark() // before looking: a mark after the look closes it
		c.mu.Lock()
		all := !slices.ContainsFunc(names, func(name string) bool { return !c.dirty[name] })
		c.mu.Unlock()
		if all && !slices.ContainsFunc(names, func(name string) bool { return !shown(name) }) {
			return
		}
		<-next
	}
}

// forget: the next refresh reads every Node, into a fleet with no plan.
func (c *viewCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = true
}

// nodeSource is the node cache: every Node, and one by name.
type nodeSource interface {
	List() []kube.Object
	Get(name string) (kube.Object, bool)
}

// refresh brings the fleet up to date with the node cache, undoing the
// last pass's amendments (fleet.Fleet.Amend): the Nodes marked are read
// again with read where they changed, or every Node on the first refresh,
// after forget, or when the autoscaler's node groups (which read takes)
// changed. It returns the fleet and the Node objects by name, valid until
// the next refresh and not to be changed.
func (c *viewCache) refresh(src nodeSource, groups []string, read func(*corev1.Node, []string) fleet.Node) (*fleet.Fleet, map[string]*corev1.Node) {
	c.mu.Lock()
	dirty, all := c.dirty, c.all || c.fleet == nil || !slices.Equal(groups, c.groups)
	c.dirty, c.all = nil, false
	c.mu.Unlock()
	if all {
		c.fleet, c.objs, c.groups = &fleet.Fleet{}, map[string]*corev1.Node{}, slices.Clone(groups)
		dirty = map[string]bool{}
		for _, o := range src.List() {
			if n, ok := o.(*corev1.Node); ok {
				dirty[n.Name] = true
			}
		}
	}
	c.fleet.Restore()
	for name := range dirty {
		o, _ := src.Get(name)
		n, ok := o.(*corev1.Node)
		old := c.objs[name]
		switch {
		case !ok:
			c.fleet.Delete(name)
			delete(c.objs, name)
		case old != nil && old.ResourceVersion == n.ResourceVersion:
			// A Node object is replaced, never changed, when its
			// resourceVersion changes: one that did not is the one held.
		case old == nil || decisive(old, n):
			c.fleet.Set(read(n, groups))
			c.objs[name] = n
		default:
			c.objs[name] = n // a heartbeat: the view holds
		}
	}
	return c.fleet, c.objs
}

// viewNodes is the fleet, up to date with the node cache, and the Node
// objects its views were read from, by name.
func (a *Aggregator) viewNodes() (*fleet.Fleet, map[string]*corev1.Node) {
	now := a.opts.Clock.Now()
	f, objs := a.views.refresh(shownNodes{a}, a.scaler.groups(), func(n *corev1.Node, groups []string) fleet.Node {
		v := fleet.NodeOf(n, a.opts.grouping())
		if a.opts.AdoptGKEConfig {
			v.GKEHandled = false
		}
		v.AutoscalerGroup = fleet.NodeGroupOf(v.Name, groups)
		a.sightings.see(&v, now)
		return v
	})
	a.sightings.prune(f)
	return f, objs
}

// decisiveUpdate: cur (a *corev1.Node, or anything else) is an update a
// pass must see (decisive).
func decisiveUpdate(old *corev1.Node, cur any) bool {
	n, ok := cur.(*corev1.Node)
	return !ok || decisive(old, n)
}

// decisive: cur differs from old in what a pass reads of a Node (its
// labels, annotations, taints, unschedulable, whether it is Ready, its
// allocatable, its kubelet's version, and its conditions' statuses, and
// whether each is stale, written before the node's last repair ended). A
// heartbeat, which only moves a condition's times, wakes no pass unless it
// makes a stale condition fresh: with thousands of Nodes heart-beating,
// passes would otherwise run back to back for nothing.
func decisive(old, cur *corev1.Node) bool {
	return old.UID != cur.UID || !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable || !slices.EqualFunc(old.Spec.Taints, cur.Spec.Taints, sameTaint) ||
		fleet.NodeReady(old) != fleet.NodeReady(cur) || !sameResources(old.Status.Allocatable, cur.Status.Allocatable) ||
		old.Status.NodeInfo.KubeletVersion != cur.Status.NodeInfo.KubeletVersion ||
		!slices.EqualFunc(detectors(old), detectors(cur), sameCondition) || freshened(old, cur)
}

// freshened: a detector's condition of cur, stale in old, was written
// again since the node's last repair (which old and cur share: their
// annotations are the same).
func freshened(old, cur *corev1.Node) bool {
	if _, ok := cur.Annotations[protocol.AnnotationLastFaultRepair]; !ok {
		return false
	}
	last := protocol.ReadLastFaultRepair(cur)
	was, is := detectors(old), detectors(cur)
	for i := range is {
		if fleet.Stale(fleet.ConditionOf(was[i]), last) && !fleet.Stale(fleet.ConditionOf(is[i]), last) {
			return true
		}
	}
	return false
}

// detectors are n's conditions that may be fault detectors'.
func detectors(n *corev1.Node) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if fleet.DetectorCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// sameCondition: a and b are the same condition in the same status (a
// fault detector's turning is decisive; its heartbeat is not).
func sameCondition(a, b corev1.NodeCondition) bool { return a.Type == b.Type && a.Status == b.Status }

func sameTaint(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
}

func sameResources(a, b corev1.ResourceList) bool {
	return maps.EqualFunc(a, b, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 })
}

// awaitCache waits until the node cache shows every write of this pass, so
// that the next pass counts the nodes it triggered: it looks again at each
// change the node cache tells of, for up to 30 seconds.
func (a *Aggregator) awaitCache(ctx context.Context, written map[string]string) {
	if len(written) == 0 {
		return
	}
	t := a.opts.Clock.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		next := a.views.nextMark() // before looking: a change after the look closes it
		shown := true
		for name, before := range written {
			obj, _ := shownNodes{a}.Get(name)
			if n, ok := obj.(*corev1.Node); ok && n.ResourceVersion == before {
				shown = false
				break
			}
		}
		if shown {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			return
		case <-t.C():
			a.log.Warn("node cache did not show this pass's writes within 30s")
			return
		}
	}
}
