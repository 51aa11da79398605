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

	"golang.org/x/time/rate"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/internal/policysource"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/policy"
)

// Aggregator is the leader-elected opportunistic maintenance controller.
type Aggregator struct {
	opts    Options
	log     *slog.Logger
	wake    chan struct{}
	leading atomic.Bool
	passes  atomic.Uint64
	nodes   *kube.Informer
	// claimsCache watches the claims Lease; wroteClaims are the claims
	// this replica last wrote (currentClaims). The pass goroutine's.
	claimsCache *kube.Informer
	wroteClaims claims
	policy      *policysource.Source
	scaler      *autoscalerSource
	recorder    *kube.Recorder
	// pace paces the decisions told (announcePlans); announceAt is when
	// the pools it left untold may be told (zero: none left).
	pace       *rate.Limiter
	announceAt time.Time

	// views caches NodeOf by resourceVersion: a pass re-reads only the
	// Nodes that changed; sightings are when it first saw each detector's
	// condition; claimedHere the claims this replica made, each at the
	// resourceVersion its node cache showed (liveClaims). The pass
	// goroutine's only.
	views       viewCache
	sightings   sightings
	claimedHere map[string]string
	refusals    refusals // writes refused for good (refused.go)
	// unannounced: the pools whose plan was made anew and not yet
	// announced (a pass that cannot write the claims announces nothing).
	unannounced map[string]bool
	// unanswered: when this replica withdrew each node's unanswered
	// trigger; the node cools down as after a failed maintenance.
	unanswered map[string]time.Time
	// shadows are the writes it did not make on observed nodes
	// (observe.go); gangs what the pods showed of the nodes' pod groups.
	shadows shadows
	gangs   gangChecks

	// Guarded by mu; reset when leadership begins.
	mu sync.Mutex
	// lastReason: pool -> its nodes' decisions, as last announced;
	// announcements counts announce's calls.
	lastReason    map[string]*poolTold
	announcements uint64
	lastPoolErr   map[string]string // pool -> last config error announced
	lastCfgErr    string
	lastWarn      map[string]string // what -> last error text logged
	lastScaled    map[string]bool   // pool -> autoscaled, as last logged
	// lastUnreadable: node -> its unreadable keys, as last announced.
	lastUnreadable map[string]string
	// lastUnproven: node -> its unproven maintenance, as last announced.
	lastUnproven map[string]string
	// lastFault: faulty node -> its decision, as last announced.
	lastFault map[string]fleet.FaultReason
	// faultCheck is when a pass is next due for a fault detector's
	// condition to reach its duration (zero for none).
	faultCheck time.Time
	// notifier posts to the webhook (nil: none is configured).
	notifier *notifier
	// ledger remembers deleted Nodes (accounting.go).
	ledger *ledger
	// claims holds what each node added to its pool's counters in the
	// last hour (accounting.go).
	claims claimWindow
	// relay makes the agents' Compute Engine calls (nil: none).
	relay    *relay
	confirms confirmer // the members' forced maintenances (confirm.go)
	// watched are the watches Healthy reads, once started.
	watched atomic.Pointer[[]*kube.Informer]
}

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
	a := &Aggregator{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), ledger: newLedger(opts.RecreateWindow), claims: claimWindow{}, claimedHere: map[string]string{}, sightings: sightings{},
		unanswered: map[string]time.Time{}, unannounced: map[string]bool{}}
	if opts.Notify != nil {
		a.notifier = newNotifier(a, *opts.Notify)
	}
	if opts.Caller != nil {
		a.relay = newRelay(a, opts.Caller)
	}
	return a, nil
}

// Passes counts the decision passes this replica has finished (as
// leader): work done, for a check that something did not happen.
func (a *Aggregator) Passes() uint64 { return a.passes.Load() }

// Leading reports whether this replica holds the lease.
func (a *Aggregator) Leading() bool { return a.leading.Load() }

// Start watches the Nodes and the ConfigMap, and runs for leadership until
// ctx ends; while leading it decides and triggers. It returns ctx's error.
func (a *Aggregator) Start(ctx context.Context) error {
	defer a.record()()
	if err := a.watch(ctx); err != nil {
		return err
	}
	return a.elect(ctx)
}

// elect runs for the Lease with client-go's leader election until ctx
// ends, one term after another: a.lead while this replica holds it. The
// Lease is given up when ctx ends, so that the other replica leads at
// once; a term ends only once lead has returned.
func (a *Aggregator) elect(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.opts.Namespace, Name: a.opts.LeaseName},
		Client:     a.opts.Leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.opts.Identity},
	}
	for ctx.Err() == nil {
		started, done := make(chan struct{}), make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: a.opts.LeaseName, ReleaseOnCancel: true,
			LeaseDuration: a.opts.LeaseDuration, RenewDeadline: a.opts.RenewDeadline, RetryPeriod: a.opts.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					close(started)
					defer close(done)
					a.lead(lctx)
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
		// Run returns before acquiring only when ctx ends; otherwise the
		// term's lead has started (or is about to) and is waited for.
		select {
		case <-started:
			<-done
		default:
			if ctx.Err() == nil {
				<-done
			}
		}
	}
	return ctx.Err()
}

// lead acts until lctx ends (leadership lost): a pass on every change,
// at most every MinInterval, and at least every Interval.
func (a *Aggregator) lead(lctx context.Context) {
	a.beginLead()
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
	var wg sync.WaitGroup
	defer wg.Wait()
	if len(a.opts.Reservations) > 0 && a.opts.ReservationReader != nil {
		wg.Go(func() { a.followReservations(lctx) })
	}
	if a.notifier != nil {
		wg.Go(func() { a.notifier.run(lctx) })
	}
	if a.relay != nil {
		wg.Go(func() { a.relay.run(lctx) })
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
		t = a.opts.Clock.NewTimer(a.untilNextPass())
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

// beginLead forgets what the last term announced: a new leader reads
// every Node and decides every pool again, and announces afresh.
func (a *Aggregator) beginLead() {
	a.mu.Lock()
	a.lastReason, a.lastPoolErr, a.lastCfgErr = map[string]*poolTold{}, map[string]string{}, ""
	a.lastWarn, a.lastScaled, a.lastUnreadable = map[string]string{}, map[string]bool{}, map[string]string{}
	a.lastFault, a.lastUnproven = map[string]fleet.FaultReason{}, map[string]string{}
	a.mu.Unlock()
	a.views.forget()
	a.confirms.forget()
	if a.notifier != nil {
		a.notifier.reset()
	}
}

// fence writes the claims Lease once on taking over, before the first
// pass, retrying every second until it succeeds; false when the lead ends
// first. Until it succeeds the replica triggers nothing.
func (a *Aggregator) fence(lctx context.Context) bool {
	for {
		by := a.opts.Identity + " at " + a.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
		cl, err := fenceClaims(lctx, a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName), by)
		if err == nil {
			a.wroteClaims = cl
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
		return policy.Config{Version: "none"}, nil // no ConfigMap: the one empty policy
	}
	return a.policy.Config()
}

// pass runs one decision pass now and returns its plans: it decides from
// the node cache and the claims, claims the nodes to trigger (fenced, see
// claims.go), then announces and triggers.
func (a *Aggregator) pass(ctx context.Context) []fleet.PoolPlan {
	defer a.passes.Add(1)
	// The pass's time (the metric): reading the node cache and deciding,
	// not the API calls around them.
	start := a.opts.Clock.Now()
	nodes, decidedOn := a.viewNodes()
	spent := a.opts.Clock.Since(start)
	cfg, cfgErr := a.config()
	a.unclaimed(ctx, nodes, decidedOn)
	cl, err := a.currentClaims()
	if err != nil {
		// Claims not counted could exceed the caps: decide nothing.
		a.warnOnce("claims", "cannot read the claims; no opportunistic trigger and no repair until they can be", err)
		return nil
	}
	a.warnOnce("claims", "", nil)
	a.withdrawUnanswered(ctx, nodes.Marked(fleet.MarkAsked), decidedOn)
	live := a.liveClaims(ctx, cl, decidedOn)
	resumed := a.opts.Clock.Now()
	for name := range live {
		// A write that may still land: counted as in maintenance, and as
		// in repair.
		nodes.Amend(name, func(v *fleet.Node) { v.Voluntary, v.InMaintenance, v.Claimed = true, true, true })
	}
	for name, at := range a.unanswered {
		nodes.Amend(name, func(v *fleet.Node) { v.Failures = unansweredFailure(v.Failures, at) })
	}
	lapse := expirePlaces(nodes, start, a.opts.RepairAskGrace)
	faults := a.decideFaults(cfg, nodes, lapse)
	plans := nodes.Decide(start, cfg)
	a.opts.Metrics.PassDuration(spent + a.opts.Clock.Since(resumed))
	a.announceConfig(cfgErr)
	a.announceUnreadable(nodes.Marked(fleet.MarkUnreadable))
	fresh, replaced := nodes.Changes()
	a.markUnannounced(fresh, replaced)
	stats := poolStats(plans)
	a.opts.Metrics.Pools.Set(stats)
	a.opts.Metrics.KnowPools(stats)
	toTrigger, approved, claimed, deferred := claimsOf(plans, faults, live, decidedOn, cfgErr)
	if deferred > 0 {
		a.log.Info("the claims Lease holds no more: triggering the rest of this pass's picks in the next", "triggered", len(toTrigger), "deferred", deferred)
	}
	if !maps.Equal(claimed, cl.nodes) {
		if ctx.Err() != nil {
			return plans // leadership lost: stop acting at once
		}
		written, err := writeClaims(ctx, a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName), cl, claimed)
		if err != nil {
			result := "error"
			if errors.Is(err, ErrFenced) {
				result = "fenced"
			}
			a.opts.Metrics.Triggers.WithLabelValues(result).Add(float64(len(toTrigger)))
			a.log.Info("claims not written; nothing triggered or approved in this pass", "nodes", len(toTrigger)+len(approved), "err", err)
			return plans
		}
		a.wroteClaims = written
	}
	if left, wait := a.announcePlans(plans); left > 0 {
		a.mu.Lock()
		a.announceAt = a.opts.Clock.Now().Add(wait)
		a.mu.Unlock()
	}
	for _, n := range append(toTrigger, approved...) {
		a.claimedHere[n.Name] = n.ResourceVersion
	}
	written := a.writeFaults(ctx, faults, decidedOn)
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
	for i, n := range toTrigger {
		if landed[i] {
			written[n.Name] = n.ResourceVersion
		}
	}
	a.awaitCache(ctx, written)
	return plans
}

// unclaimed is the part of a pass that does not depend on the claims:
// renamed taints, gangs, slices and the accounting.
func (a *Aggregator) unclaimed(ctx context.Context, nodes *fleet.Fleet, decidedOn map[string]*corev1.Node) {
	a.renameTaints(ctx, decidedOn)
	a.applyGangs(ctx, nodes, decidedOn)
	a.applySliceAsks(ctx, nodes, decidedOn)
	a.countRecreated(ctx)
	a.countVanished()
}
