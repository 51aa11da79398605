package aggregator

// Observe-only: on a node observed only (Options.ObserveOnly, or the
// policy's observeOnly for its pool) the aggregator decides and says as it
// would (its Events, marked, its metrics, its log) and changes nothing:
// its Node writes are kept in a protocol.Shadow per node that its passes
// read through (shownNodes), and it makes no Compute Engine call for the
// node.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// shadows are the unmade writes of observed nodes, by node name, with a
// generation each that moves with every change (a shown Node's
// resourceVersion carries it, so that the view cache reads it again).
type shadows struct {
	mu  sync.Mutex
	own map[string]*protocol.Shadow
	// agents' are what the observed nodes' agents published on their
	// Leases (watchAgentShadows).
	agents map[string]*protocol.Shadow
	gen    map[string]uint64
}

func (s *shadows) init() {
	if s.own == nil {
		s.own, s.agents, s.gen = map[string]*protocol.Shadow{}, map[string]*protocol.Shadow{}, map[string]uint64{}
	}
}

// observed reports whether n is observed only.
func (a *Aggregator) observed(n *corev1.Node) bool {
	if a.opts.ObserveOnly {
		return true
	}
	cfg, _ := a.config() // Observe is read even from an invalid policy
	return cfg.ObserveOnly(n.Labels[a.opts.PoolLabel])
}

// observedName is observed for the cached Node named name (false when it
// is not cached).
func (a *Aggregator) observedName(name string) bool {
	if cfg, _ := a.config(); !a.opts.ObserveOnly && !cfg.Observe.Cluster && len(cfg.Observe.Pools) == 0 || a.nodes == nil {
		return false
	}
	o, ok := a.nodes.Get(name)
	n, isNode := o.(*corev1.Node)
	return ok && isNode && a.observed(n)
}

// writeNode replaces the Node before (as the aggregator showed it) by
// after, conditional on its resourceVersion; on an observed node it keeps
// the change instead.
func (a *Aggregator) writeNode(ctx context.Context, before, after *corev1.Node) error {
	if !a.observed(before) {
		if strings.Contains(after.ResourceVersion, shownSeparator) {
			// Decided on unmade writes of a node observed until now: the
			// next pass decides again from the Node as it is.
			a.poke()
			return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, after.Name, errObservedUntilNow)
		}
		_, err := a.opts.Client.UpdateNode(ctx, after, fieldManager)
		return err
	}
	a.shadows.mu.Lock()
	a.shadows.init()
	s := a.shadows.own[before.Name]
	if s == nil {
		s = &protocol.Shadow{}
		a.shadows.own[before.Name] = s
	}
	changed := s.Record(before, after)
	if changed {
		a.shadows.gen[before.Name]++
	}
	a.shadows.mu.Unlock()
	if changed {
		a.log.Info("observe-only: Node not written", "node", before.Name)
		a.views.mark(before.Name)
	}
	return nil
}

// errObservedUntilNow: a write decided on a node's unmade writes, after
// the node stopped being observed only.
var errObservedUntilNow = errors.New("decided while the node was observed only; decided again")

// shownSeparator joins a Node's resourceVersion and its shadow's
// generation in a shown Node's resourceVersion.
const shownSeparator = "~observed-"

// show is n as the aggregator left it: a copy with its unmade writes when
// it has any, else n itself.
func (a *Aggregator) show(n *corev1.Node) *corev1.Node {
	a.shadows.mu.Lock()
	defer a.shadows.mu.Unlock()
	own, agent := a.shadows.own[n.Name], a.shadows.agents[n.Name]
	if own == nil && agent == nil {
		return n
	}
	if !a.observed(n) {
		delete(a.shadows.own, n.Name) // not observed now: the Node as it is
		return n
	}
	shown := showAgent(n, agent)
	if shown == n {
		shown = n.DeepCopy()
	}
	if own != nil {
		own.Overlay(shown)
	}
	shown.ResourceVersion = n.ResourceVersion + shownSeparator + strconv.FormatUint(a.shadows.gen[n.Name], 10)
	return shown
}

// shownNodes is the node cache as the aggregator left it (show): what
// its passes read.
type shownNodes struct{ a *Aggregator }

func (s shownNodes) Get(name string) (kube.Object, bool) {
	o, ok := s.a.nodes.Get(name)
	if n, isNode := o.(*corev1.Node); ok && isNode {
		return s.a.show(n), true
	}
	return o, ok
}

func (s shownNodes) List() []kube.Object {
	objs := s.a.nodes.List()
	s.a.shadows.mu.Lock()
	none := len(s.a.shadows.own) == 0 && len(s.a.shadows.agents) == 0
	s.a.shadows.mu.Unlock()
	if none {
		return objs
	}
	out := make([]kube.Object, len(objs))
	for i, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			o = s.a.show(n)
		}
		out[i] = o
	}
	return out
}

// markObserved marks an observed node's Event as observe-only.
func (a *Aggregator) markObserved(name, msg string) string {
	if strings.HasPrefix(msg, "Observe-only") || !a.observedName(name) {
		return msg
	}
	return protocol.ObservedMark + msg
}

// watchAgentShadows follows the observed nodes' Leases in the agents'
// namespace: each holds its agent's unmade writes, which the aggregator
// shows on the node (show) as it would read them on an acting node, and
// tells in notifications (marked observe-only). A Lease is only ever read
// for the node it is named after, and only while that node is observed.
func (a *Aggregator) watchAgentShadows(ctx context.Context) *kube.Informer {
	inf := kube.NewInformer(leasesWatch(a.opts.Leases, a.opts.AgentNamespace, metav1.ListOptions{LabelSelector: protocol.ObservedNodeSelector}), kube.InformerOptions{Name: "observed-nodes", Logger: a.log.With("watch", "observed-nodes")})
	inf.AddHandlers(kube.Handlers{
		Add:    func(o kube.Object) { a.agentShadowChanged(o, false) },
		Update: func(_, cur kube.Object) { a.agentShadowChanged(cur, false) },
		Delete: func(o kube.Object) { a.agentShadowChanged(o, true) },
	})
	go inf.Run(ctx)
	return inf
}

// agentShadowChanged takes the Lease o of an observed node as its agent's
// unmade writes now (none when gone), and tells the steps they make.
func (a *Aggregator) agentShadowChanged(o kube.Object, gone bool) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	var cur *protocol.Shadow
	if !gone {
		s, err := protocol.DecodeShadow(l.Annotations[protocol.AnnotationShadow])
		if err != nil {
			a.log.Warn("an observed node's Lease is unreadable; its agent's state is not shown", "lease", l.Name, "err", err)
		} else {
			cur = &s
		}
	}
	a.shadows.mu.Lock()
	a.shadows.init()
	old := a.shadows.agents[l.Name]
	if cur == nil {
		delete(a.shadows.agents, l.Name)
	} else {
		a.shadows.agents[l.Name] = cur
	}
	a.shadows.gen[l.Name]++
	obj, cached := a.nodes.Get(l.Name)
	n, isNode := obj.(*corev1.Node)
	var was, is *corev1.Node
	if cached && isNode && a.observed(n) {
		was, is = overlaid(n, old), overlaid(n, cur)
	}
	a.shadows.mu.Unlock()
	a.views.mark(l.Name)
	a.poke()
	if was != nil {
		a.notifyObserved(was, is)
	}
}

// overlaid is a copy of n with the changes of s, an agent's shadow, that
// its agent may make (showAgent); n itself for none.
func overlaid(n *corev1.Node, s *protocol.Shadow) *corev1.Node {
	if s == nil {
		return n
	}
	c := s.Clone() // the overlay forgets on a copy: the shadow held stays
	return showAgent(n, &c)
}
