package aggregator

// The aggregator's view of the Nodes: what a decision looks at of each
// Node (Node, NodeOf), kept per Node version so that a pass over 65,000
// Nodes reads again only those that changed.

import (
	"context"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/kube"
)

// cachedView is a Node's view, for the Node version rv.
type cachedView struct {
	obj  *corev1.Node // what node was read from, or a later object that differs in nothing decisive
	node fleet.Node
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
	buf   []fleet.Node
}

// refresh is the view of every Node in objs (what is not a Node is
// skipped), read with read where it changed, and the Node objects by name.
// Both are valid until the next refresh, and are not to be changed.
func (c *viewCache) refresh(objs []kube.Object, read func(*corev1.Node) fleet.Node) ([]fleet.Node, map[string]*corev1.Node) {
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
func (a *Aggregator) viewNodes() ([]fleet.Node, map[string]*corev1.Node) {
	return a.views.refresh(a.nodes.List(), func(n *corev1.Node) fleet.Node {
		v := fleet.NodeOf(n, a.opts.grouping())
		if a.opts.AdoptGKEConfig {
			v.GKEHandled = false
		}
		return v
	})
}

// decisive: cur differs from old in what a pass reads of a Node (its
// labels, annotations, taints, unschedulable, whether it is Ready, its
// allocatable, its kubelet's version, and its conditions' statuses). A heartbeat, which only moves a
// condition's times, wakes no pass: with thousands of Nodes heart-beating,
// passes would otherwise run back to back for nothing.
func decisive(old, cur *corev1.Node) bool {
	return old.UID != cur.UID || !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable || !slices.EqualFunc(old.Spec.Taints, cur.Spec.Taints, sameTaint) ||
		fleet.NodeReady(old) != fleet.NodeReady(cur) || !sameResources(old.Status.Allocatable, cur.Status.Allocatable) ||
		old.Status.NodeInfo.KubeletVersion != cur.Status.NodeInfo.KubeletVersion ||
		!slices.EqualFunc(detectors(old), detectors(cur), sameCondition)
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
// that the next pass counts the nodes it triggered.
func (a *Aggregator) awaitCache(ctx context.Context, written map[string]string) {
	if len(written) == 0 {
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for name, before := range written {
			obj, _ := a.nodes.Get(name)
			if n, ok := obj.(*corev1.Node); ok && n.ResourceVersion == before {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn("node cache did not show this pass's writes", "err", err)
	}
}
