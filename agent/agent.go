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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/drain"
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
}

// Maintainer asks Compute Engine to start the pending maintenance of the
// agent's own VM now; compute.VM implements it.
type Maintainer interface {
	PerformMaintenance(ctx context.Context, requestID string) (operation string, err error)
	// WaitOperation returns when the operation has ended: nil when it
	// succeeded.
	WaitOperation(ctx context.Context, operation string) error
}

// Events records Kubernetes Events on the agent's Node.
type Events interface {
	NodeEvent(warning bool, reason, message string)
}

// Watcher is the part of metadata.Watcher the agent uses.
type Watcher interface {
	Watch(ctx context.Context, key string, h metadata.Handler) error
}

// Options configure an Agent (see New for what is required).
type Options struct {
	Client   kubernetes.Interface
	NodeName string
	// Self is the agent's own pod, never evicted.
	Self    types.NamespacedName
	Watcher Watcher
	Pods    *drain.NodePods
	Config  Config
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
	// AcceleratorResources make a pod accelerator work (see Idleness); nil
	// means DefaultAcceleratorResources.
	AcceleratorResources []corev1.ResourceName
	// RetryInterval is the delay between refused evictions.
	RetryInterval time.Duration
	// DrainReserve bounds the time kept for system and DaemonSet pods at
	// the end of a drain (drain.Options.Reserve).
	DrainReserve time.Duration
	Metrics      Metrics
	Events       Events
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Agent runs the maintenance lifecycle of one node.
type Agent struct {
	opts Options
	log  *slog.Logger

	wake chan struct{}

	mu      sync.Mutex
	signals Signals
	// unrecognized holds the keys whose last answer was not understood.
	unrecognized map[string]bool
	changedAt    time.Time // when a signal last changed
	drainFor     time.Time // Started of the maintenance the running drain is for
	drainDone    time.Time // Started of the maintenance whose drain finished
	drainStop    context.CancelFunc
	drainGroup   sync.WaitGroup

	performFor    string         // request ID of the call started by this process
	performResult *PerformResult // how it ended
	performGroup  sync.WaitGroup

	nodes cache.SharedIndexInformer

	// wakeAt is when the last decision asked to step again (zero: only on
	// change). Used by the loop goroutine only.
	wakeAt time.Time

	// counted is what the interruption counters hold, by InterruptionKey:
	// they follow the Node's counts (the agent's own, a previous agent's,
	// and the aggregator's). Used by the loop goroutine only.
	counted map[string]int

	// Reconcile failures, for Healthy; guarded by mu.
	failures     int
	failingSince time.Time
	lastErr      error
}

// watchNode starts one watch of the agent's own Node and waits for it.
func (a *Agent) watchNode(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(a.opts.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opts.NodeName).String()
		}))
	a.nodes = factory.Core().V1().Nodes().Informer()
	_ = a.nodes.SetTransform(slimNode)
	_, _ = a.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.poke() },
		UpdateFunc: func(any, any) { a.poke() },
		DeleteFunc: func(any) { a.poke() },
	})
	go a.nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.nodes.HasSynced) {
		return fmt.Errorf("watch node %q: %w", a.opts.NodeName, ctx.Err())
	}
	return nil
}

// slimNode drops what the agent never reads from its cached Node: the
// managed fields and the status but for nodeInfo (the image list alone is
// often tens of kilobytes). The agent updates the Node from this copy; an
// update leaves the status as it is (it is a subresource) and omitted
// managed fields as they are.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Status = corev1.NodeStatus{NodeInfo: n.Status.NodeInfo}
	return n, nil
}

// errNodeNotFound: the Node is not (or no longer) in the API server.
var errNodeNotFound = errors.New("node not found")

func (a *Agent) cachedNode() (*corev1.Node, error) {
	obj, ok, err := a.nodes.GetStore().GetByKey(a.opts.NodeName)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", errNodeNotFound, a.opts.NodeName)
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, fmt.Errorf("node cache holds %T", obj)
	}
	return n, nil
}

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
	if opts.AcceleratorResources == nil {
		opts.AcceleratorResources = DefaultAcceleratorResources
	}
	opts.Config = opts.Config.withDefaults()
	if opts.NewRequestID == nil {
		opts.NewRequestID = func() string { return string(uuid.NewUUID()) }
	}
	return &Agent{opts: opts, log: opts.Logger.With("node", opts.NodeName), wake: make(chan struct{}, 1), unrecognized: map[string]bool{}}, nil
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
func (nopMetrics) SetNode(time.Time, time.Time, bool)          {}
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
	a.opts.Pods.OnChange(a.poke) // idleness follows the pods
	if err := a.opts.Pods.Start(ctx); err != nil {
		return fmt.Errorf("watch pods of node %q: %w", a.opts.NodeName, err)
	}
	if err := a.watchNode(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer a.performGroup.Wait()
	defer a.stopDrain()
	for _, key := range []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.opts.Watcher.Watch(ctx, key, func(ctx context.Context, ans metadata.Answer) bool {
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

// recordReconcile remembers whether the Node could be reconciled and
// returns how long to wait before trying again after a failure: 1 s doubled
// per consecutive failure up to 30 s, with up to half of it as jitter.
func (a *Agent) recordReconcile(err error) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.failures, a.failingSince, a.lastErr = 0, time.Time{}, nil
		return 0
	}
	if a.failures == 0 {
		a.failingSince = a.opts.Clock.Now()
	}
	a.failures++
	a.lastErr = err
	return backoff.Default.Delay(a.failures)
}

// ErrUnhealthy is returned by Healthy.
var ErrUnhealthy = errors.New("agent unhealthy")

// Healthy reports an error when the agent has failed to reconcile its Node
// (for example, the API server is unreachable) for longer than limit.
func (a *Agent) Healthy(limit time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failures == 0 {
		return nil
	}
	if since := a.opts.Clock.Since(a.failingSince); since > limit {
		return fmt.Errorf("%w: node %q not reconciled for %s (%d attempts): %v", ErrUnhealthy, a.opts.NodeName, since.Round(time.Second), a.failures, a.lastErr)
	}
	return nil
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
			err = fmt.Errorf("maintenance-event not served: %w", metadata.ErrUnrecognized)
			break
		}
		var ev metadata.Event
		if ev, err = metadata.ParseEvent(ans.Value); err == nil {
			sig.Event, sig.EventKnown = ev, true
		}
	case metadata.KeyPreempted:
		if ans.Absent {
			err = fmt.Errorf("preempted not served: %w", metadata.ErrUnrecognized)
			break
		}
		var p bool
		if p, err = metadata.ParsePreempted(ans.Value); err == nil {
			sig.Preempted, sig.PreemptedKnown = p, true
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
			a.opts.Events.NodeEvent(true, EventUnrecognizedValue, fmt.Sprintf(
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
	var dec Decision
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
			node, err = a.opts.Client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		obs := Observation{
			Now:            a.opts.Clock.Now(),
			Signals:        a.signals,
			BootID:         node.Status.NodeInfo.BootID,
			KubeletVersion: node.Status.NodeInfo.KubeletVersion,
			Unschedulable:  node.Spec.Unschedulable,
			RequestID:      a.opts.NewRequestID(),
		}
		var ms protocol.MaintenanceState
		obs.Trigger, obs.TriggerSet, ms = protocol.ReadTrigger(node)
		obs.Opportunistic = ms.OpportunisticTriggered
		if obs.TriggerSet && a.opts.ManualGate != nil {
			obs.ManualBlocked, obs.ManualBlockedDetail = a.opts.ManualGate(node, obs.Now)
		}
		obs.Idle, obs.Busy = Idleness(a.opts.Pods.List(), a.opts.AcceleratorResources)
		obs.PodsKnown = true
		changedAt := a.changedAt
		st := protocol.ReadAgentState(node)
		obs.DrainDone = st.Phase == protocol.PhaseDraining && a.drainDone.Equal(st.Started)
		if r := a.performResult; r != nil && r.RequestID == st.RequestID {
			obs.Perform = r
		}
		a.mu.Unlock()
		carried = protocol.ReadRepairs(node).Interruptions
		dec = Step(a.opts.Config, st, obs)
		if !applyDecision(node, dec) {
			return nil
		}
		if _, err := a.opts.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: "maintenance-handler-agent"}); err != nil {
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
func (a *Agent) execute(ctx context.Context, dec Decision, carried protocol.Counts, latency time.Duration) {
	st := dec.State
	a.wakeAt = dec.WakeAt
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
	a.mu.Lock()
	drainFor := a.drainFor
	a.mu.Unlock()
	switch {
	case st.Phase == protocol.PhaseDraining && !drainFor.Equal(st.Started):
		a.stopDrain()
		a.startDrain(ctx, st)
	case st.Phase != protocol.PhaseDraining && !drainFor.IsZero():
		a.stopDrain()
	}
}

func (a *Agent) startDrain(ctx context.Context, st State) {
	dctx, cancel := context.WithCancel(ctx)
	a.mu.Lock()
	a.drainFor = st.Started
	a.drainStop = cancel
	a.mu.Unlock()
	d := drain.New(drain.Options{
		Client: a.opts.Client, Pods: a.opts.Pods, Skip: a.opts.Self, RetryInterval: a.opts.RetryInterval, Reserve: a.opts.DrainReserve,
		TaintKey: protocol.TaintImpendingTermination,
		Clock:    a.opts.Clock, Logger: a.log, Recorder: a.opts.Metrics, Events: a.opts.Events,
	})
	a.drainGroup.Add(1)
	go func() {
		defer a.drainGroup.Done()
		a.log.Info("drain started", "reason", st.Reason, "deadline", st.Deadline)
		res, err := d.Drain(dctx, st.Deadline)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				a.log.Warn("drain ended early", "err", err)
			}
			return
		}
		a.log.Info("drain finished", "evicted", res.Evicted, "deleted", res.Deleted, "left", res.Left)
		a.mu.Lock()
		a.drainDone = st.Started
		a.mu.Unlock()
		a.poke()
	}()
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

// performMinimum is the least time a performMaintenance call gets to go
// through (with retries), even when the drain used up the deadline.
const performMinimum = time.Minute

// startPerform runs the performMaintenance call for st's request ID, unless
// this process has already started it. The call is retried until st's
// deadline (at least performMinimum from now); its result wakes the loop.
func (a *Agent) startPerform(ctx context.Context, st State) {
	a.mu.Lock()
	if a.performFor == st.RequestID {
		a.mu.Unlock()
		return
	}
	a.performFor = st.RequestID
	a.mu.Unlock()
	timeout := max(st.Deadline.Sub(a.opts.Clock.Now()), performMinimum)
	a.performGroup.Add(1)
	go func() {
		defer a.performGroup.Done()
		a.log.Info("asking Compute Engine to start the maintenance", "request_id", st.RequestID, "timeout", timeout)
		res := &PerformResult{RequestID: st.RequestID}
		if a.opts.Maintainer == nil {
			res.Err, res.Outcome = errors.New("this agent has no Compute Engine client"), protocol.ManualFailed
		} else {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			res.Operation, res.Err = a.opts.Maintainer.PerformMaintenance(cctx, st.RequestID)
			cancel()
			if ctx.Err() != nil {
				return // stopping: the next agent continues from the Node
			}
			switch {
			case res.Err == nil:
			case errors.Is(res.Err, compute.ErrPermissionDenied):
				res.Outcome = protocol.ManualPermissionDenied
			case errors.Is(res.Err, compute.ErrRefused):
				res.Outcome = protocol.ManualRefused
			default:
				res.Outcome = protocol.ManualFailed
			}
		}
		if res.Err != nil {
			a.log.Warn("performMaintenance failed", "request_id", st.RequestID, "outcome", res.Outcome, "err", res.Err)
		} else {
			a.log.Info("performMaintenance accepted", "request_id", st.RequestID, "operation", res.Operation)
		}
		a.setPerformResult(res)
		if res.Err != nil || a.opts.Maintainer == nil {
			return
		}
		// Follow the operation to its end: one that fails puts the node
		// back in service (Step). Bounded by the manual start timeout.
		octx, cancel := context.WithTimeout(ctx, a.opts.Config.ManualStartTimeout)
		err := a.opts.Maintainer.WaitOperation(octx, res.Operation)
		cancel()
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, compute.ErrOperationFailed):
			a.log.Warn("performMaintenance operation failed", "request_id", st.RequestID, "operation", res.Operation, "err", err)
			failed := *res
			failed.OperationErr = err
			a.setPerformResult(&failed)
		case err != nil:
			a.log.Warn("performMaintenance operation not followed to its end", "operation", res.Operation, "err", err)
		default:
			a.log.Info("performMaintenance operation done", "operation", res.Operation)
		}
	}()
}

func (a *Agent) setPerformResult(res *PerformResult) {
	a.mu.Lock()
	a.performResult = res
	a.mu.Unlock()
	a.poke()
}

func (a *Agent) stopDrain() {
	a.mu.Lock()
	stop := a.drainStop
	a.drainStop, a.drainFor = nil, time.Time{}
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
	a.drainGroup.Wait()
}

// ErrNoNode is why WaitForNode still waits: the Node is not registered, or
// the agent may not read it, or the API server does not answer.
var ErrNoNode = errors.New("waiting for the node")

// WaitForNode blocks until the agent can read its Node (the agent may start
// before its Node is registered). Each time the reason it waits changes, it
// logs it and tells waiting (for /healthz); it retries with backoff.Default.
func WaitForNode(ctx context.Context, c kubernetes.Interface, name string, clk clock.Clock, log *slog.Logger, waiting func(error)) (*corev1.Node, error) {
	var last string
	for attempt := 1; ; attempt++ {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if last != "" {
				log.Info("node found", "node", name)
			}
			return n, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var why error
		switch {
		case apierrors.IsNotFound(err):
			why = fmt.Errorf("%w %q: it is not registered yet (the kubelet registers it)", ErrNoNode, name)
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			why = fmt.Errorf("%w %q: the agent may not read it; check its ServiceAccount's ClusterRole (get, watch nodes): %w", ErrNoNode, name, err)
		default:
			why = fmt.Errorf("%w %q: the API server did not answer: %w", ErrNoNode, name, err)
		}
		waiting(why)
		delay := backoff.Default.Delay(attempt)
		if why.Error() != last {
			log.Warn("waiting for the node", "node", name, "err", why, "retry_in", delay)
			last = why.Error()
		}
		if err := backoff.Wait(ctx, clk, delay); err != nil {
			return nil, err
		}
	}
}
