package drain

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// BudgetSource lists and watches the PodDisruptionBudgets of one
// namespace; kube.Client's BudgetListWatch is one.
type BudgetSource func(namespace string) kube.ListWatch

// budgets follows, for one drain, the PodDisruptionBudgets of the
// namespaces where an eviction was refused, so that a refused pod is tried
// again as soon as every budget that covers it allows a disruption, not
// only RetryInterval after the refusal. A namespace is watched from its
// first refusal until the drain ends: a node's agent watches budgets only
// while it drains, and only where they hold it back.
type budgets struct {
	source BudgetSource
	ctx    context.Context
	log    *slog.Logger
	// changed is signalled (without blocking) on every change of a
	// watched budget, and gen counts those changes.
	changed chan struct{}
	gen     atomic.Uint64

	mu        sync.Mutex
	informers map[string]*kube.Informer // by namespace
}

// newBudgets returns a follower whose watches end with ctx; nil when
// source is nil (the fixed interval only).
func newBudgets(ctx context.Context, source BudgetSource, log *slog.Logger) *budgets {
	if source == nil {
		return nil
	}
	return &budgets{source: source, ctx: ctx, log: log, changed: make(chan struct{}, 1), informers: map[string]*kube.Informer{}}
}

// Changed is signalled when a watched budget changes; nil (never) for no
// follower.
func (b *budgets) Changed() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.changed
}

// generation counts the changes of the watched budgets: the drain looks
// at its refused pods' budgets again only when it moved.
func (b *budgets) generation() uint64 {
	if b == nil {
		return 0
	}
	return b.gen.Load()
}

// follow starts watching namespace's budgets, once.
func (b *budgets) follow(namespace string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.informers[namespace]; ok {
		return
	}
	inf := kube.NewInformer(b.source(namespace), kube.InformerOptions{Name: "budgets", Logger: b.log.With("watch", "budgets", "namespace", namespace)})
	inf.AddHandlers(kube.OnAnyChange(func() {
		b.gen.Add(1)
		select {
		case b.changed <- struct{}{}:
		default:
		}
	}))
	b.informers[namespace] = inf
	go inf.Run(b.ctx)
}

// allows reports whether every budget covering p, as last seen, allows a
// disruption (its status observed its spec, disruptionsAllowed > 0), and
// a version of those budgets that changes with any of them. Before its
// namespace's budgets are read, or with no budget covering p (one that
// refused it was deleted), it allows with the version "none".
func (b *budgets) allows(p *corev1.Pod) (ok bool, version string) {
	if b == nil {
		return false, ""
	}
	b.mu.Lock()
	inf := b.informers[p.Namespace]
	b.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return false, ""
	}
	ok = true
	var versions []string
	for _, o := range inf.List() {
		pdb, isBudget := o.(*policyv1.PodDisruptionBudget)
		if !isBudget {
			continue
		}
		if !covers(pdb, p) {
			continue
		}
		versions = append(versions, pdb.Name+"@"+pdb.ResourceVersion)
		if pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.DisruptionsAllowed <= 0 {
			ok = false
		}
	}
	if len(versions) == 0 {
		return true, "none"
	}
	sort.Strings(versions)
	return ok, strings.Join(versions, ",")
}

// covers reports whether pdb's selector selects p (policy/v1: an empty
// selector selects every pod of the namespace, none selects no pod).
func covers(pdb *policyv1.PodDisruptionBudget, p *corev1.Pod) bool {
	if pdb.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(p.Labels))
}
