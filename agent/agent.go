package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Agent runs the maintenance lifecycle of one node.
type Agent struct {
	opts Options
	log  *slog.Logger
	wake chan struct{}

	// slice names the node's group, a multi-host slice or a reservation
	// group ("" for none), group is the group, siblings the watch of its
	// hosts and stopSiblings its end (slice.go); they follow the Node
	// (followMembership). Used by the loop goroutine only.
	slice        string
	group        protocol.Group
	siblings     *kube.Informer
	stopSiblings context.CancelFunc

	mu      sync.Mutex
	signals lifecycle.Signals
	// unrecognized holds the keys whose last answer was not understood.
	unrecognized  map[string]bool
	changedAt     time.Time            // when a signal last changed
	drainFor      lifecycle.DrainOrder // the running drain
	drainObserved bool                 // it is a plan only (observe.go)
	drainEnded    lifecycle.DrainOrder // the last drain that ran to its end
	drainLeft     []string             // the pods that drain left on the node
	drainStop     context.CancelFunc
	drainGroup    sync.WaitGroup
	drainStart    time.Time // when the running drain began

	// The workload notice (workload.go): the node's side, guarded by mu.
	notice lifecycle.WorkloadTarget
	// noticeKnown: the loop has decided once, and notice says so.
	noticeKnown bool
	notifyWake  chan struct{}
	// badLead: the pods whose checkpoint lead was said to be invalid;
	// used by the notifier goroutine only.
	badLead map[types.UID]bool
	// timing is the drain's (DrainTiming), for the told
	// times.
	timing drain.Timing

	performFor    string                   // request ID of the call started by this process
	schedule      Schedule                 // what the VM's own clock says, once known
	performResult *lifecycle.PerformResult // how it ended
	performGroup  sync.WaitGroup
	// following names the operation this process follows (follow), and
	// stopFollowing ends that.
	following     string
	stopFollowing context.CancelFunc

	nodes *kube.Informer
	// The node's ResourceSlices, its DeviceTaintRules as last made (nil: not known), none served; devices.go.
	devices       *kube.Informer
	deviceRules   map[string]bool
	noDeviceRules bool

	// wakeAt is when the last decision asked to step again (zero: only on
	// change). Used by the loop goroutine only.
	wakeAt time.Time
	// conditionsFrom is the resourceVersion of the cached Node the last
	// write of the node lifecycle conditions was decided on
	// (syncConditions).
	conditionsFrom string

	// claims are the ResourceClaims the node's pods use, as read
	// (claims.go). Used by the loop goroutine only.
	claims map[string]claimHold

	// counted is what the interruption counters hold, by InterruptionKey:
	// they follow the Node's counts (the agent's own, a previous agent's,
	// and the aggregator's). Used by the loop goroutine only.
	counted map[string]int

	// mode is the observe-only mode and the writes it kept (observe.go).
	mode observer

	// Reconcile failures, for Healthy; guarded by mu.
	failures     int
	failingSince time.Time
	lastErr      error
	watches      []watch // the watches the agent needs, as started
}

// fieldManager names the agent's writes.
const fieldManager = protocol.FieldManagerAgent

// New returns an Agent, or ErrInvalidOptions. Client, NodeName, Watcher
// and Pods are required; every other zero field has a default: Config's
// from DefaultConfig (a zero deadline would evict every pod at once), no
// metrics, no Events, DefaultAcceleratorResources, the drain's retry
// interval and reserve.
func New(opts Options) (*Agent, error) {
	var missing []string
	for _, f := range []struct {
		name string
		nil  bool
	}{{"Client", opts.Client == nil}, {"NodeName", opts.NodeName == ""}, {"Watcher", opts.Watcher == nil}, {"Pods", opts.Pods == nil}} {
		if f.nil {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s required", ErrInvalidOptions, strings.Join(missing, ", "))
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = nopMetrics{}
	}
	if opts.Events == nil {
		opts.Events = nopMetrics{}
	}
	if opts.PoolLabel == "" {
		opts.PoolLabel = protocol.LabelNodePool
	}
	if opts.AcceleratorResources == nil {
		opts.AcceleratorResources = DefaultAcceleratorResources
	}
	if opts.AcceleratorDeviceClasses == nil {
		opts.AcceleratorDeviceClasses = DefaultAcceleratorDeviceClasses
	}
	opts.Config = opts.Config.WithDefaults()
	if opts.Drainer == nil {
		opts.Drainer = drain.New(drain.Options{
			Client: opts.Client, Pods: opts.Pods, Skip: opts.Self, RetryInterval: opts.RetryInterval, Budgets: opts.Client.BudgetListWatch, Timing: opts.DrainTiming,
			TaintKey: protocol.TaintImpendingTermination, Requests: opts.EvictionRequests,
			Clock: opts.Clock, Logger: opts.Logger.With("node", opts.NodeName), Recorder: opts.Metrics, Events: opts.Events,
		})
	}
	if opts.NewRequestID == nil {
		opts.NewRequestID = func() string { return string(uuid.NewUUID()) }
	}
	a := &Agent{opts: opts, timing: drain.TimingOr(opts.DrainTiming), log: opts.Logger.With("node", opts.NodeName), wake: make(chan struct{}, 1), notifyWake: make(chan struct{}, 1),
		badLead: map[types.UID]bool{}, unrecognized: map[string]bool{}, claims: map[string]claimHold{}}
	if opts.Relay != nil {
		opts.Relay.a = a
	}
	// Until the mode is known, the node is observed only.
	a.mode.on.Store(opts.ObserveOnly != nil)
	a.mode.published = mayExist
	a.opts.Events = markedEvents{Events: opts.Events, on: &a.mode.on}
	return a, nil
}

var (
	_ Metrics = nopMetrics{}
	_ Events  = nopMetrics{}
)

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Start watches the metadata server and the node's pods and reconciles the
// Node until ctx ends. It returns ctx's error.
func (a *Agent) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.opts.Pods.OnChange(a.poke)         // idleness follows the pods
	a.opts.Pods.OnChange(a.pokeNotifier) // and so does their notice
	a.needs(a.opts.Pods)
	if err := a.opts.Pods.Start(ctx); err != nil {
		return fmt.Errorf("watch pods of node %q: %w", a.opts.NodeName, err)
	}
	if err := a.watchNode(ctx); err != nil {
		return err
	}
	a.watchDevices(ctx)
	if node, err := a.cachedNodeAsIs(); err == nil {
		a.decideMode(ctx, node) // before anything may write
		a.followMembership(ctx, a.shown(node))
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.performGroup.Wait()
	defer a.stopDrain()
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.notify(ctx)
	}()
	go func() {
		defer wg.Done()
		a.learnSchedule(ctx)
	}()
	for _, key := range []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.opts.Watcher.Watch(ctx, key, func(ctx context.Context, ans metadata.Answer) bool {
				if a.opts.Mirror != nil {
					a.opts.Mirror.Set(key, ans) // served as read, understood or not
				}
				return a.observe(key, ans)
			})
		}()
	}
	// Reconcile on every signal change, every drain end and every change
	// of the Node (one watch, scoped to this Node: no periodic request).
	a.poke()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var timerC <-chan time.Time
		if timer != nil {
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.wake:
		case <-timerC:
		}
		err := a.reconcile(ctx)
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if !a.wakeAt.IsZero() {
			timer = a.opts.Clock.NewTimer(max(a.wakeAt.Sub(a.opts.Clock.Now()), 0))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if delay := a.recordReconcile(err); delay > 0 {
			a.log.Warn("reconcile failed", "err", err, "retry_in", delay)
			a.sleep(ctx, delay)
			a.poke()
		}
	}
}

func (a *Agent) sleep(ctx context.Context, d time.Duration) {
	_ = backoff.Wait(ctx, a.opts.Clock, d)
}

// observe parses one answer into the signals. It reports false for a value
// it does not recognise, which changes nothing.
func (a *Agent) observe(key string, ans metadata.Answer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	sig := a.signals
	var err error
	switch key {
	case metadata.KeyMaintenanceEvent:
		if ans.Absent {
			// Not served on this VM (TPU VMs): no TERMINATE will come.
			sig.Event, sig.EventKnown, sig.EventNotServed = maintenance.EventNone, true, true
			break
		}
		sig.EventNotServed = false
		var ev maintenance.Event
		if ev, err = maintenance.ParseEvent(ans.Value); err == nil {
			sig.Event, sig.EventKnown, sig.EventSince = ev, true, ans.Since
		}
	case metadata.KeyPreempted:
		if ans.Absent {
			err = fmt.Errorf("preempted not served: %w", maintenance.ErrUnrecognized)
			break
		}
		var p bool
		if p, err = maintenance.ParsePreempted(ans.Value); err == nil {
			sig.Preempted, sig.PreemptedKnown, sig.PreemptedSince = p, true, ans.Since
		}
	case metadata.KeyUpcomingMaintenance:
		if ans.Absent {
			sig.Notice, sig.NoticePresent, sig.NoticeKnown, sig.NoticeNotYet = maintenance.Notice{}, false, true, ans.NotYet
			break
		}
		sig.NoticeNotYet = false
		var n maintenance.Notice
		var present bool
		if n, present, err = maintenance.ParseNotice(ans.Value); err == nil {
			sig.Notice, sig.NoticePresent, sig.NoticeKnown = n, present, true
		}
	}
	if err != nil {
		a.log.Warn("unrecognized metadata value; not acting on it", "key", key, "err", err)
		a.opts.Metrics.Unrecognized(key)
		// One Warning per key each time it turns unrecognised, however
		// many odd values follow: the log and the metric count each one.
		if !a.unrecognized[key] {
			a.unrecognized[key] = true
			a.opts.Events.NodeEvent(true, protocol.EventUnrecognizedValue, fmt.Sprintf(
				"The metadata server answered %s with a value the agent does not recognise; it is ignored, and so are further unrecognised values of this key until a recognised one: %v", key, err))
		}
		return false
	}
	delete(a.unrecognized, key)
	a.log.Info("metadata changed", "key", key, "value", maintenance.Excerpt(ans.Value), "absent", ans.Absent)
	a.signals = sig
	a.changedAt = a.opts.Clock.Now()
	a.poke()
	return true
}

// reconcile reads the Node, steps the state machine, writes the result in
// one update, and starts or stops the drain.
func (a *Agent) reconcile(ctx context.Context) error {
	if node, err := a.cachedNodeAsIs(); err == nil {
		a.decideMode(ctx, node)
		a.followMembership(ctx, a.shown(node))
	}
	a.readClaims(ctx, a.opts.Pods.List())
	var dec lifecycle.Decision
	var latency time.Duration
	var carried protocol.Counts // the repairs the aggregator counted on the Node
	var repair protocol.RepairApproval
	attempt := 0
	// The watch cache first; after a conflict it is behind, so read the
	// Node from the API server and try again at once.
	try := func() error {
		attempt++
		var node *corev1.Node
		var err error
		if attempt == 1 {
			if node, err = a.cachedNode(); err == nil {
				node = node.DeepCopy()
			}
		} else {
			node, err = a.readNode(ctx)
		}
		if err != nil {
			return err
		}
		st := protocol.ReadAgentState(node)
		obs, changedAt := a.observation(node, st)
		repair = obs.Repair
		carried = protocol.ReadRepairs(node).Interruptions
		dec = lifecycle.Step(a.opts.Config, st, obs)
		var before *corev1.Node
		if a.observing() {
			before = node.DeepCopy()
		}
		if !dec.Apply(node) {
			return nil
		}
		if before != nil {
			a.keep(before, node)
		} else {
			node.ManagedFields = nil // omitted: the API server keeps its own
			if err := a.writeNode(ctx, node); err != nil {
				return err
			}
		}
		// Taint latency: from the metadata change to the taint on the Node
		// (a label is not a metadata change).
		if dec.Cordon && dec.State.Reason != protocol.ReasonManual && !changedAt.IsZero() {
			latency = a.opts.Clock.Since(changedAt)
		}
		return nil
	}
	var err error
	for range 5 {
		if err = try(); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("update node %q: %w", a.opts.NodeName, err)
	}
	a.execute(ctx, dec, carried, latency, repair)
	a.publishShadow(ctx)
	return nil
}
