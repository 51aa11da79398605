package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Metrics is what the loop records; metrics.Agent implements it.
type Metrics interface {
	drain.Recorder
	// AddInterruptions counts n more interruptions of a kind.
	AddInterruptions(i protocol.Interruption, n int)
	Migration()
	Unrecognized(key string)
	TaintLatency(d time.Duration)
	DrainDuration(d time.Duration)
	SetPhase(phase protocol.Phase)
	ManualTrigger(outcome string)
	SetNode(drainDeadline, scheduled time.Time, busy bool)
	SetFailures(n int)
	// PermissionDenied counts a Compute Engine call refused for lack of
	// the IAM permission.
	PermissionDenied(permission string)
}

// Events records Kubernetes Events on the agent's Node.
type Events interface {
	NodeEvent(warning bool, reason, message string)
}

// Watcher is the part of metadata.Watcher the agent uses.
type Watcher interface {
	Watch(ctx context.Context, key string, h metadata.Handler) error
}

// API is the part of the Kubernetes API the agent calls; kube.Client
// implements it.
type API interface {
	NodeGetter
	// UpdateNode replaces the Node, conditional on its resourceVersion.
	UpdateNode(ctx context.Context, n *corev1.Node, fieldManager string) (*corev1.Node, error)
	// NodeListWatch lists and watches the one Node named name.
	NodeListWatch(name string) kube.ListWatch
	// LabelledNodesListWatch lists and watches the Nodes whose label key
	// has value (the hosts of the agent's multi-host slice).
	LabelledNodesListWatch(key, value string) kube.ListWatch
	// BudgetListWatch lists and watches a namespace's
	// PodDisruptionBudgets: the drain follows those that refuse it.
	BudgetListWatch(namespace string) kube.ListWatch
	// PatchNodeStatus patches the Node's status: the node lifecycle
	// conditions the agent keeps (lifecycle.NodeConditions).
	PatchNodeStatus(ctx context.Context, name string, data []byte) error
	// PatchPod patches a pod on the node (the workload notice), or its
	// subresource ("status") when given.
	PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource string) error
	drain.API
}

// NodeGetter reads a Node.
type NodeGetter interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// Options configure an Agent (see New for what is required).
type Options struct {
	Client   API
	NodeName string
	// Self is the agent's own pod, never evicted.
	Self    types.NamespacedName
	Watcher Watcher
	// Mirror, when set, serves on the node the keys as the agent reads
	// them, and the drain's deadline (metadata.Mirror).
	Mirror *metadata.Mirror
	Pods   *drain.NodePods
	Config lifecycle.Config
	// Maintainer starts a manual maintenance once the node is drained; nil
	// fails every manual maintenance (the node goes back in service).
	Maintainer Maintainer
	// NewRequestID returns a fresh performMaintenance requestId (a UUID);
	// nil means a random UUID.
	NewRequestID func() string
	// ManualGate, when set, says why the maintenance policy refuses a
	// manual trigger on the node now (a Manual* outcome and a detail; ""
	// when it does not).
	ManualGate func(node *corev1.Node, now time.Time) (reason, detail string)
	// PoolLabel and SliceLabel say which multi-host slice the node belongs
	// to (protocol.SliceOf); PoolLabel "" means protocol.LabelNodePool.
	// The agent follows the other hosts of its slice (slice.go).
	PoolLabel, SliceLabel string
	// AcceleratorResources make a pod accelerator work (see idleness); nil
	// means DefaultAcceleratorResources.
	AcceleratorResources []corev1.ResourceName
	// RetryInterval is the delay between refused evictions when the
	// budgets that refused them do not change (drain.Options).
	RetryInterval time.Duration
	// DrainReserve bounds the time kept for system and DaemonSet pods at
	// the end of a drain (drain.Options.Reserve).
	DrainReserve time.Duration
	// DrainMargin is kept before the deadline, after every pod's grace
	// (drain.Options.Margin).
	DrainMargin time.Duration
	// Drainer empties the node; nil is a drain.Drainer of the node's Pods
	// with RetryInterval, DrainReserve and DrainMargin.
	Drainer Drainer
	Metrics Metrics
	Events  Events
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Agent runs the maintenance lifecycle of one node.
type Agent struct {
	opts Options
	log  *slog.Logger

	wake chan struct{}

	// slice is the node's multi-host slice ("" for none), and siblings
	// the watch of its hosts (slice.go); set before the loop starts.
	slice    string
	siblings *kube.Informer

	mu      sync.Mutex
	signals lifecycle.Signals
	// unrecognized holds the keys whose last answer was not understood.
	unrecognized map[string]bool
	changedAt    time.Time            // when a signal last changed
	drainFor     lifecycle.DrainOrder // the running drain
	drainDone    time.Time            // Started of the maintenance whose drain finished
	drainLeft    []string             // the pods that drain left on the node
	drainStop    context.CancelFunc
	drainGroup   sync.WaitGroup
	drainStart   time.Time // when the running drain began

	// The workload notice (workload.go): the node's side, guarded by mu.
	notice lifecycle.WorkloadTarget
	// noticeKnown: the loop has decided once, and notice says so.
	noticeKnown bool
	notifyWake  chan struct{}
	// badLead: the pods whose checkpoint lead was said to be invalid;
	// used by the notifier goroutine only.
	badLead map[types.UID]bool
	// timing is the drain's (DrainReserve, DrainMargin), for the told
	// times.
	timing drain.Timing

	performFor    string                   // request ID of the call started by this process
	performResult *lifecycle.PerformResult // how it ended
	performGroup  sync.WaitGroup

	nodes *kube.Informer

	// wakeAt is when the last decision asked to step again (zero: only on
	// change). Used by the loop goroutine only.
	wakeAt time.Time
	// conditionsFrom is the resourceVersion of the cached Node the last
	// write of the node lifecycle conditions was decided on
	// (syncConditions).
	conditionsFrom string

	// counted is what the interruption counters hold, by InterruptionKey:
	// they follow the Node's counts (the agent's own, a previous agent's,
	// and the aggregator's). Used by the loop goroutine only.
	counted map[string]int

	// Reconcile failures, for Healthy; guarded by mu.
	failures     int
	failingSince time.Time
	lastErr      error
}

// fieldManager names the agent's writes.
const fieldManager = "maintenance-handler-agent"

// ErrInvalidOptions is returned by New for Options missing a required
// field.
var ErrInvalidOptions = errors.New("invalid agent options")

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
	opts.Config = opts.Config.WithDefaults()
	if opts.Drainer == nil {
		opts.Drainer = drain.New(drain.Options{
			Client: opts.Client, Pods: opts.Pods, Skip: opts.Self, RetryInterval: opts.RetryInterval, Budgets: opts.Client.BudgetListWatch, Reserve: opts.DrainReserve,
			Margin: opts.DrainMargin, TaintKey: protocol.TaintImpendingTermination,
			Clock: opts.Clock, Logger: opts.Logger.With("node", opts.NodeName), Recorder: opts.Metrics, Events: opts.Events,
		})
	}
	if opts.NewRequestID == nil {
		opts.NewRequestID = func() string { return string(uuid.NewUUID()) }
	}
	return &Agent{opts: opts, timing: drain.Options{Reserve: opts.DrainReserve, Margin: opts.DrainMargin}.Timing(), log: opts.Logger.With("node", opts.NodeName), wake: make(chan struct{}, 1), notifyWake: make(chan struct{}, 1),
		badLead: map[types.UID]bool{}, unrecognized: map[string]bool{}}, nil
}

// nopMetrics records nothing: the metrics and Events of an Agent given none.
type nopMetrics struct{}

func (nopMetrics) Escalation()                                 {}
func (nopMetrics) Eviction(string)                             {}
func (nopMetrics) AddInterruptions(protocol.Interruption, int) {}
func (nopMetrics) Migration()                                  {}
func (nopMetrics) Unrecognized(string)                         {}
func (nopMetrics) TaintLatency(time.Duration)                  {}
func (nopMetrics) DrainDuration(time.Duration)                 {}
func (nopMetrics) SetPhase(protocol.Phase)                     {}
func (nopMetrics) ManualTrigger(string)                        {}
func (nopMetrics) PermissionDenied(string)                     {}
func (nopMetrics) SetNode(time.Time, time.Time, bool)          {}
func (nopMetrics) SetFailures(int)                             {}
func (nopMetrics) NodeEvent(bool, string, string)              {}

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
	if err := a.opts.Pods.Start(ctx); err != nil {
		return fmt.Errorf("watch pods of node %q: %w", a.opts.NodeName, err)
	}
	if err := a.watchNode(ctx); err != nil {
		return err
	}
	if err := a.watchSlice(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.performGroup.Wait()
	defer a.stopDrain()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.notify(ctx)
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
			sig.Event, sig.EventKnown, sig.EventNotServed = metadata.EventNone, true, true
			break
		}
		sig.EventNotServed = false
		var ev metadata.Event
		if ev, err = metadata.ParseEvent(ans.Value); err == nil {
			sig.Event, sig.EventKnown, sig.EventSince = ev, true, ans.Since
		}
	case metadata.KeyPreempted:
		if ans.Absent {
			err = fmt.Errorf("preempted not served: %w", metadata.ErrUnrecognized)
			break
		}
		var p bool
		if p, err = metadata.ParsePreempted(ans.Value); err == nil {
			sig.Preempted, sig.PreemptedKnown, sig.PreemptedSince = p, true, ans.Since
		}
	case metadata.KeyUpcomingMaintenance:
		if ans.Absent {
			sig.Notice, sig.NoticePresent, sig.NoticeKnown, sig.NoticeNotYet = metadata.Notice{}, false, true, ans.NotYet
			break
		}
		sig.NoticeNotYet = false
		var n metadata.Notice
		var present bool
		if n, present, err = metadata.ParseNotice(ans.Value); err == nil {
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
	a.log.Info("metadata changed", "key", key, "value", metadata.Excerpt(ans.Value), "absent", ans.Absent)
	a.signals = sig
	a.changedAt = a.opts.Clock.Now()
	a.poke()
	return true
}

// reconcile reads the Node, steps the state machine, writes the result in
// one update, and starts or stops the drain.
func (a *Agent) reconcile(ctx context.Context) error {
	var dec lifecycle.Decision
	var latency time.Duration
	var carried protocol.Counts // the repairs the aggregator counted on the Node
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
			node, err = a.opts.Client.GetNode(ctx, a.opts.NodeName)
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		obs := lifecycle.Observation{
			Now:            a.opts.Clock.Now(),
			Signals:        a.signals,
			BootID:         node.Status.NodeInfo.BootID,
			KubeletVersion: node.Status.NodeInfo.KubeletVersion,
			Unschedulable:  node.Spec.Unschedulable,
			RequestID:      a.opts.NewRequestID(),
		}
		var ms protocol.MaintenanceState
		obs.Trigger, obs.TriggerSet, ms = protocol.ReadTrigger(node)
		obs.Opportunistic, obs.TriggerFor = ms.OpportunisticTriggered, ms.ScheduledTime
		obs.TriggeredAt, _ = time.Parse(time.RFC3339, ms.TriggeredAt)
		st := protocol.ReadAgentState(node)
		a.observeSlice(node, st, &obs)
		if obs.TriggerSet && a.opts.ManualGate != nil {
			obs.ManualBlocked, obs.ManualBlockedDetail = a.opts.ManualGate(node, obs.Now)
		}
		obs.Idle, obs.Busy = idleness(a.opts.Pods.List(), a.opts.AcceleratorResources)
		obs.PodsKnown = true
		changedAt := a.changedAt
		obs.GKEHandling = lifecycle.GKEHandling(node, st)
		obs.DrainDone = st.Phase == protocol.PhaseDraining && a.drainDone.Equal(st.Started)
		if obs.DrainDone {
			obs.DrainLeft = a.drainLeft
		}
		if r := a.performResult; r != nil && r.RequestID == st.RequestID {
			obs.Perform = r
		}
		a.mu.Unlock()
		carried = protocol.ReadRepairs(node).Interruptions
		dec = lifecycle.Step(a.opts.Config, st, obs)
		if !dec.Apply(node) {
			return nil
		}
		if _, err := a.opts.Client.UpdateNode(ctx, node, fieldManager); err != nil {
			return err
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
	a.execute(ctx, dec, carried, latency)
	return nil
}

// execute records a decision that is now on the Node, and runs the drain
// while the phase is Draining.
func (a *Agent) execute(ctx context.Context, dec lifecycle.Decision, carried protocol.Counts, latency time.Duration) {
	st := dec.State
	a.wakeAt = dec.WakeAt
	a.syncConditions(ctx, st)
	if a.opts.Mirror != nil {
		deadline := st.Deadline
		if !st.Active() {
			deadline = time.Time{}
		}
		a.opts.Mirror.SetDeadline(deadline)
	}
	for _, e := range dec.Events {
		a.opts.Events.NodeEvent(e.Warning, e.Reason, e.Message)
		a.log.Info("node event", "reason", e.Reason, "message", e.Message)
	}
	a.syncCounts(st.Interruptions.Plus(carried))
	if latency > 0 {
		a.opts.Metrics.TaintLatency(latency)
	}
	if dec.Manual != "" {
		a.opts.Metrics.ManualTrigger(dec.Manual)
	}
	if dec.Perform {
		a.startPerform(ctx, st)
	}
	if dec.Migration {
		a.opts.Metrics.Migration()
	}
	if dec.Drained {
		a.opts.Metrics.DrainDuration(a.opts.Clock.Since(st.Started))
	}
	a.opts.Metrics.SetPhase(st.Phase)
	var deadline, scheduled time.Time
	if st.Phase == protocol.PhaseDraining {
		deadline = st.Deadline
	}
	if sec, err := strconv.ParseInt(st.ScheduledTime, 10, 64); err == nil {
		scheduled = time.Unix(sec, 0)
	}
	a.opts.Metrics.SetNode(deadline, scheduled, st.Busy != "")
	a.opts.Metrics.SetFailures(st.Failures.Count)
	a.followDrain(ctx, dec.Drain)
	a.mu.Lock()
	drainStart := a.drainStart
	a.mu.Unlock()
	a.setNotice(lifecycle.WorkloadTargetOf(st, drainStart))
}

// syncCounts makes the interruption counters follow the Node's counts (the
// agent's and the repairs the aggregator counted), which only grow: so they
// continue a node's totals across agent restarts and reboots.
func (a *Agent) syncCounts(counts protocol.Counts) {
	if a.counted == nil {
		a.counted = map[string]int{}
	}
	for key, n := range counts {
		i, ok := protocol.ParseInterruptionKey(key)
		if !ok || n <= a.counted[key] {
			continue
		}
		a.opts.Metrics.AddInterruptions(i, n-a.counted[key])
		a.counted[key] = n
	}
}
