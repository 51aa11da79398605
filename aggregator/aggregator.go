package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/internal/kuberest"
	"github.com/maintenance-handler/maintenance-handler/internal/lease"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// fieldManager names the aggregator's writes.
const fieldManager = "maintenance-handler-aggregator"

// Options configure an Aggregator. Client, Leases, Namespace and Identity
// are required; every other zero field takes its value from Default.
type Options struct {
	// Client reads and writes Nodes and reads ConfigMaps; Leases holds the
	// leader Lease and the claims Lease.
	Client *kuberest.Client
	Leases *lease.Client
	// EventClient writes the Events (nil: Client). A client of its own has
	// its own rate limit, so that a flood of Events (a new leader says why
	// of every node with a pending notice) never delays a trigger.
	EventClient kube.EventWriter
	// Namespace holds the Lease and the ConfigMap.
	Namespace string
	// ConfigMap names the ConfigMap whose policy.yaml is the Config; empty
	// means none (the nodes' annotations only).
	ConfigMap string
	// LeaseName names the Lease; Identity is this replica's holder name.
	LeaseName, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader
	// election's (lease.Election).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// PoolLabel names a node's pool.
	PoolLabel string
	// SliceLabel, when set, names a node's multi-host slice (a self-managed
	// cluster's own label); empty: GKE's rule, a TPU pool whose topology
	// has more chips than one node (protocol.SliceOf).
	SliceLabel string
	// Interval is the longest time between passes (idle times and windows
	// change with time alone); MinInterval is the shortest.
	Interval, MinInterval time.Duration
	// RecreateWindow: a Node deleted and created again under its name
	// within it was repaired (AutoRepair); one deleted while NotReady and
	// not created again within it vanished.
	RecreateWindow time.Duration
	// TriggerAnswerTimeout: an opportunistic trigger no agent has answered
	// within it (the agent down, the node NotReady) is withdrawn, with an
	// Event, and its place under the caps freed. It is longer than the
	// agents' own limit on a trigger's age, so a live agent answers first.
	TriggerAnswerTimeout time.Duration
	// AdoptGKEConfig: act on the opportunistic-config annotation of nodes
	// where GKE's own maintenance handler does too (GKE 1.31 and later).
	// False: those are left to GKE; a pool configured in the policy
	// ConfigMap is the aggregator's either way.
	AdoptGKEConfig bool
	// AutoscalerStatus is the cluster autoscaler's status ConfigMap,
	// namespace/name, from which the pools it manages are found; empty
	// means none is read.
	AutoscalerStatus string
	// Metrics nil: metrics on a registry of their own, exported nowhere.
	Metrics *metrics.Aggregator
	Clock   clock.Clock
	Logger  *slog.Logger
}

// DefaultAutoscalerStatus is where the cluster autoscaler writes its
// status by default, and where GKE's does: the aggregator binary's default
// AutoscalerStatus.
const DefaultAutoscalerStatus = "kube-system/cluster-autoscaler-status"

// Default holds the default of every optional field (the flags' defaults).
var Default = Options{
	LeaseName:     "maintenance-handler-aggregator",
	LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
	PoolLabel: protocol.LabelNodePool,
	Interval:  30 * time.Second, MinInterval: time.Second,
	RecreateWindow: time.Hour, TriggerAnswerTimeout: 10 * time.Minute,
}

// withDefaults fills every zero optional field.
func (o Options) withDefaults() Options {
	fill := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&o.LeaseDuration, Default.LeaseDuration)
	fill(&o.RenewDeadline, Default.RenewDeadline)
	fill(&o.RetryPeriod, Default.RetryPeriod)
	fill(&o.Interval, Default.Interval)
	fill(&o.MinInterval, Default.MinInterval)
	fill(&o.RecreateWindow, Default.RecreateWindow)
	fill(&o.TriggerAnswerTimeout, Default.TriggerAnswerTimeout)
	if o.LeaseName == "" {
		o.LeaseName = Default.LeaseName
	}
	if o.PoolLabel == "" {
		o.PoolLabel = Default.PoolLabel
	}
	if o.Metrics == nil {
		o.Metrics = metrics.NewAggregator(metrics.NewRegistry())
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Aggregator is the leader-elected opportunistic maintenance controller.
type Aggregator struct {
	opts     Options
	log      *slog.Logger
	wake     chan struct{}
	leading  atomic.Bool
	passes   atomic.Uint64
	nodes    cache.SharedIndexInformer
	policy   *policy.Source
	scaler   *autoscalerSource
	recorder *kube.Recorder

	// views caches NodeOf by resourceVersion: a pass re-reads only the
	// Nodes that changed. claimedHere holds the claims this replica made,
	// each at the resourceVersion its node cache showed (see liveClaims).
	// Both used by the pass goroutine only.
	views       viewCache
	claimedHere map[string]string
	// unanswered: when this replica withdrew each node's unanswered
	// trigger; the node cools down as after a failed maintenance.
	unanswered map[string]time.Time

	// Guarded by mu; reset when leadership begins.
	mu          sync.Mutex
	lastReason  map[string]string // node -> last decision reason announced
	lastPoolErr map[string]string // pool -> last config error announced
	lastCfgErr  string
	lastWarn    map[string]string // what -> last error text logged
	lastScaled  map[string]bool   // pool -> autoscaled, as last logged
	// lastUnreadable: node -> its unreadable keys, as last announced.
	lastUnreadable map[string]string
	// ledger remembers deleted Nodes (accounting.go).
	ledger *ledger
}

// ErrInvalidOptions is returned by New for Options missing a required
// field.
var ErrInvalidOptions = errors.New("invalid aggregator options")

// New returns an Aggregator, or ErrInvalidOptions.
func New(opts Options) (*Aggregator, error) {
	var missing []string
	if opts.Client == nil {
		missing = append(missing, "Client")
	}
	if opts.Leases == nil {
		missing = append(missing, "Leases")
	}
	if opts.Namespace == "" {
		missing = append(missing, "Namespace")
	}
	if opts.Identity == "" {
		missing = append(missing, "Identity")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s required", ErrInvalidOptions, strings.Join(missing, ", "))
	}
	opts = opts.withDefaults()
	return &Aggregator{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), ledger: newLedger(opts.RecreateWindow), claimedHere: map[string]string{},
		unanswered: map[string]time.Time{}}, nil
}

func (a *Aggregator) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Passes counts the decision passes this replica has finished (as
// leader): work done, for a check that something did not happen.
func (a *Aggregator) Passes() uint64 { return a.passes.Load() }

// Leading reports whether this replica holds the lease.
func (a *Aggregator) Leading() bool { return a.leading.Load() }

// Start watches the Nodes and the ConfigMap, and runs for leadership until
// ctx ends; while leading it decides and triggers. It returns ctx's error.
func (a *Aggregator) Start(ctx context.Context) error {
	events := a.opts.EventClient
	if events == nil {
		events = a.opts.Client
	}
	a.recorder = kube.NewRecorder(events, corev1.EventSource{Component: protocol.EventSourceAggregator},
		kube.RecorderOptions{Logger: a.log})
	defer a.recorder.Shutdown()

	a.nodes = cache.NewSharedIndexInformer(a.opts.Client.AllNodesListWatch(), &corev1.Node{}, 0, cache.Indexers{})
	_, _ = a.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { a.nodeAdded(o); a.poke() },
		UpdateFunc: func(old, cur any) {
			a.observeNode(old, cur)
			if o, ok := old.(*corev1.Node); !ok || decisiveUpdate(o, cur) {
				a.poke()
			}
		},
		DeleteFunc: func(o any) { a.nodeDeleted(o); a.poke() },
	})
	go a.nodes.Run(ctx.Done())
	synced := []cache.InformerSynced{a.nodes.HasSynced}
	if a.opts.ConfigMap != "" {
		a.policy = policy.NewSource(a.opts.Client.ConfigMapListWatch(a.opts.Namespace, a.opts.ConfigMap),
			a.opts.Namespace, a.opts.ConfigMap, a.log.With("watch", "policy"))
		a.policy.OnChange(a.poke)
		if err := a.policy.Start(ctx); err != nil {
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("sync node cache: %w", ctx.Err())
	}
	if ns, name, ok := strings.Cut(a.opts.AutoscalerStatus, "/"); ok {
		var err error
		if a.scaler, err = a.startAutoscalerSource(ctx, ns, name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.log.Warn("cannot read the cluster autoscaler's status: the pools it manages are not known, and are treated as not autoscaled (declare them with autoscaled: true in the policy ConfigMap)",
				"configmap", a.opts.AutoscalerStatus, "err", err)
		}
	}

	election := &lease.Election{Client: a.opts.Leases, Namespace: a.opts.Namespace, Name: a.opts.LeaseName, Identity: a.opts.Identity,
		LeaseDuration: a.opts.LeaseDuration, RenewDeadline: a.opts.RenewDeadline, RetryPeriod: a.opts.RetryPeriod,
		Logger: a.log, FieldManager: fieldManager}
	for ctx.Err() == nil {
		election.Run(ctx, a.lead)
	}
	return ctx.Err()
}

// lead acts until lctx ends (leadership lost): a pass on every change,
// at most every MinInterval, and at least every Interval.
func (a *Aggregator) lead(lctx context.Context) {
	a.mu.Lock()
	a.lastReason, a.lastPoolErr, a.lastCfgErr = map[string]string{}, map[string]string{}, ""
	a.lastWarn, a.lastScaled, a.lastUnreadable = map[string]string{}, map[string]bool{}, map[string]string{}
	a.mu.Unlock()
	a.leading.Store(true)
	a.opts.Metrics.Leader.Set(1)
	a.log.Info("started leading", "identity", a.opts.Identity)
	// Once the last pass has ended, a follower exports no pool series (a
	// pass under way when the lease was lost may still have set some): the
	// leader's are the only ones, so sums by pool are not stale or doubled.
	defer func() {
		a.leading.Store(false)
		a.opts.Metrics.Leader.Set(0)
		a.opts.Metrics.Pools.Set(nil)
		a.opts.Metrics.Unreadable.Set(nil)
		a.log.Info("stopped leading", "identity", a.opts.Identity)
	}()
	if !a.fence(lctx) {
		return
	}
	for {
		a.pass(lctx)
		if lctx.Err() != nil {
			return
		}
		t := a.opts.Clock.NewTimer(a.opts.MinInterval)
		select {
		case <-lctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		t = a.opts.Clock.NewTimer(a.opts.Interval)
		select {
		case <-lctx.Done():
			t.Stop()
			return
		case <-a.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// fence writes the claims Lease once on taking over, before the first
// pass, retrying every second until it succeeds; false when the lead ends
// first. Until it succeeds the replica triggers nothing.
func (a *Aggregator) fence(lctx context.Context) bool {
	for {
		by := a.opts.Identity + " at " + a.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
		_, err := fenceClaims(lctx, a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName), by)
		if err == nil {
			a.warnOnce("fence", "", nil)
			return true
		}
		if lctx.Err() != nil {
			return false
		}
		a.warnOnce("fence", "cannot fence the claims on taking over; no opportunistic trigger until it can", err)
		t := a.opts.Clock.NewTimer(time.Second)
		select {
		case <-lctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// config is the ConfigMap's configuration, or why it is invalid.
func (a *Aggregator) config() (policy.Config, error) {
	if a.policy == nil {
		return policy.Config{}, nil
	}
	return a.policy.Config()
}

// pass runs one decision pass now and returns its plans: it decides from
// the node cache and the claims, claims the nodes to trigger (fenced, see
// claims.go), then announces and triggers.
func (a *Aggregator) pass(ctx context.Context) []PoolPlan {
	defer a.passes.Add(1)
	// The pass's time (the metric): reading the node cache and deciding,
	// not the API calls around them.
	start := a.opts.Clock.Now()
	views, decidedOn := a.viewNodes()
	spent := a.opts.Clock.Since(start)
	// What does not depend on the claims: slices, and the accounting.
	a.applySliceAsks(ctx, views, decidedOn)
	a.countRecreated(ctx)
	a.countVanished()
	cl, err := readClaims(ctx, a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName))
	if err != nil {
		// Claims not counted could exceed the caps: decide nothing.
		a.warnOnce("claims", "cannot read the claims; no opportunistic trigger until they can be", err)
		return nil
	}
	a.warnOnce("claims", "", nil)
	a.withdrawUnanswered(ctx, views, decidedOn)
	live := a.liveClaims(ctx, cl, decidedOn)
	resumed := a.opts.Clock.Now()
	groups := a.scaler.groups()
	for i := range views {
		if _, ok := live[views[i].Name]; ok {
			// A write that may still land: counted as in maintenance.
			views[i].Voluntary, views[i].InMaintenance = true, true
		}
		views[i].AutoscalerGroup = nodeGroupOf(views[i].Name, groups)
		if at, ok := a.unanswered[views[i].Name]; ok {
			views[i].Failures = unansweredFailure(views[i].Failures, at)
		}
	}
	cfg, cfgErr := a.config()
	plans := Decide(start, cfg, views)
	a.opts.Metrics.PassDuration(spent + a.opts.Clock.Since(resumed))
	a.announceConfig(cfgErr)
	a.announceUnreadable(views)
	a.forgetUndecided(plans)
	a.opts.Metrics.Pools.Set(poolStats(plans))

	claimed := maps.Clone(live)
	var toTrigger []*corev1.Node
	for _, p := range plans {
		if cfgErr != nil || p.ConfigErr != nil {
			continue
		}
		for _, name := range p.Trigger {
			if n := decidedOn[name]; n != nil {
				toTrigger = append(toTrigger, n)
				claimed[name] = n.ResourceVersion
			}
		}
	}
	if !maps.Equal(claimed, cl.nodes) {
		if ctx.Err() != nil {
			return plans // leadership lost: stop acting at once
		}
		if _, err := writeClaims(ctx, a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName), cl, claimed); err != nil {
			result := "error"
			if errors.Is(err, ErrFenced) {
				result = "fenced"
			}
			a.opts.Metrics.Triggers.WithLabelValues(result).Add(float64(len(toTrigger)))
			a.log.Info("claims not written; nothing triggered in this pass", "nodes", len(toTrigger), "err", err)
			return plans
		}
	}
	for _, p := range plans {
		a.announce(p)
	}
	for _, n := range toTrigger {
		a.claimedHere[n.Name] = n.ResourceVersion
	}
	// Up to inFlight at once: after a fleet-wide storm of notices a pass
	// picks hundreds of nodes, and one at a time the last would wait for
	// every round trip before it.
	landed := make([]bool, len(toTrigger))
	var g errgroup.Group
	g.SetLimit(inFlight)
	for i, n := range toTrigger {
		g.Go(func() error {
			if ctx.Err() == nil { // else leadership lost: stop acting at once
				landed[i] = a.trigger(ctx, n)
			}
			return nil
		})
	}
	_ = g.Wait()
	written := map[string]string{} // node -> resourceVersion before our write
	for i, n := range toTrigger {
		if landed[i] {
			written[n.Name] = n.ResourceVersion
		}
	}
	a.awaitCache(ctx, written)
	return plans
}

// liveClaims are the claims whose write may still land (see resolve).
//
// A claim this replica made itself needs no read: it claimed the node at
// the version its cache showed, and a watch's cache only moves forward, so
// once the cache shows another version the conditional write has landed
// (and the cache shows it) or never will. Any other claim (a previous
// leader's, or one whose node the cache lacks) is read from the API
// server, up to inFlight at once: after a storm a pass may hold hundreds.
func (a *Aggregator) liveClaims(ctx context.Context, cl claims, cached map[string]*corev1.Node) map[string]string {
	for name := range a.claimedHere {
		if _, ok := cl.nodes[name]; !ok {
			delete(a.claimedHere, name)
		}
	}
	live := map[string]string{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(inFlight)
	for name, rv := range cl.nodes {
		c := cached[name]
		switch {
		case c != nil && c.ResourceVersion == rv:
			live[name] = rv // unchanged since the claim
			continue
		case c != nil && a.claimedHere[name] == rv:
			continue // ours, and the cache has moved past it: resolved
		}
		g.Go(func() error {
			state := claimLive // unknown (the read failed): counted
			n, err := a.opts.Client.GetNode(ctx, name)
			switch {
			case err == nil:
				state = resolve(rv, c, n)
			case apierrors.IsNotFound(err):
				state = resolve(rv, c, nil)
			}
			if state == claimLive {
				mu.Lock()
				live[name] = rv
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return live
}

// trigger writes the opportunistic trigger onto n, conditional on the Node
// being as the pass saw it (n, a cached object: not modified), and says
// whether it landed.
func (a *Aggregator) trigger(ctx context.Context, cached *corev1.Node) bool {
	n := cached.DeepCopy()
	name := n.Name
	// The agent re-checks the trigger: made now, for this notice.
	protocol.WriteTrigger(n, protocol.MaintenanceState{OpportunisticTriggered: true,
		TriggeredAt: a.opts.Clock.Now().UTC().Format(time.RFC3339), TriggeredBy: a.opts.Identity,
		ScheduledTime: protocol.ReadAgentState(n).ScheduledTime})
	_, err := a.opts.Client.UpdateNode(ctx, n, fieldManager)
	switch {
	case err == nil:
		a.opts.Metrics.Triggers.WithLabelValues("ok").Inc()
		a.log.Info("triggered opportunistic maintenance", "node", name)
		return true
	case apierrors.IsConflict(err):
		a.opts.Metrics.Triggers.WithLabelValues("conflict").Inc()
	default:
		a.opts.Metrics.Triggers.WithLabelValues("error").Inc()
		a.log.Warn("trigger failed", "node", name, "err", err)
	}
	return false
}

// withdrawUnanswered removes the opportunistic triggers that no agent
// answered within TriggerAnswerTimeout (its agent down, the node NotReady:
// the agent neither started nor refused), each with a Warning Event; the
// next pass no longer counts them against the caps. A write that
// conflicts is tried again next pass.
func (a *Aggregator) withdrawUnanswered(ctx context.Context, views []Node, nodes map[string]*corev1.Node) {
	now := a.opts.Clock.Now()
	for name, at := range a.unanswered {
		if now.Sub(at) > unansweredCooldown {
			delete(a.unanswered, name)
		}
	}
	for _, v := range views {
		cached := nodes[v.Name]
		if !v.Asked || !v.Triggered || v.Phase != protocol.PhaseIdle || v.TriggeredAt.IsZero() || now.Sub(v.TriggeredAt) <= a.opts.TriggerAnswerTimeout || cached == nil {
			continue
		}
		_, _, ms := protocol.ReadTrigger(cached)
		n := cached.DeepCopy()
		protocol.ConsumeTrigger(n)
		if _, err := a.opts.Client.UpdateNode(ctx, n, fieldManager); err != nil {
			a.log.Info("unanswered trigger not withdrawn; next pass tries again", "node", n.Name, "err", err)
			continue
		}
		a.unanswered[n.Name] = now
		a.nodeEvent(n.Name, n.UID, true, protocol.EventTriggerWithdrawn, fmt.Sprintf(
			"No agent answered the opportunistic trigger written at %s by %s within %s (the agent is down or the node NotReady): withdrawn; the node no longer counts against the caps, and is not picked again for %s.",
			ms.TriggeredAt, ms.TriggeredBy, a.opts.TriggerAnswerTimeout, unansweredCooldown))
	}
}

// unansweredCooldown is how long a node whose trigger went unanswered is
// not picked again, as after a failed voluntary maintenance (the agents'
// first cool-down).
const unansweredCooldown = time.Hour

// unansweredFailure is f with the unanswered trigger withdrawn at at
// counted as one more failure, when that is the later news.
func unansweredFailure(f protocol.Failures, at time.Time) protocol.Failures {
	if retry := at.Add(unansweredCooldown); retry.After(f.RetryAfter) {
		f.Count++
		f.Reason, f.Last, f.RetryAfter = "unanswered", at, retry
	}
	return f
}

// awaitCache waits until the node cache shows every write of this pass, so
// that the next pass counts the nodes it triggered.
func (a *Aggregator) awaitCache(ctx context.Context, written map[string]string) {
	if len(written) == 0 {
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for name, before := range written {
			obj, _, _ := a.nodes.GetStore().GetByKey(name)
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

// decisiveUpdate: cur (a *corev1.Node, or anything else) is an update a
// pass must see (decisive).
func decisiveUpdate(old *corev1.Node, cur any) bool {
	n, ok := cur.(*corev1.Node)
	return !ok || decisive(old, n)
}
