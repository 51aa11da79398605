package drain

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Drainer empties one node.
type Drainer struct {
	opts Options
	// timing is TimingOr(opts.Timing).
	timing Timing
}

// New returns a Drainer.
func New(opts Options) *Drainer {
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Recorder == nil {
		opts.Recorder = nopRecorder{}
	}
	if opts.Events == nil {
		opts.Events = nopRecorder{}
	}
	return &Drainer{opts: opts, timing: TimingOr(opts.Timing)}
}

// Result summarises a drain.
type Result struct {
	Evicted, Deleted int
	// Left names the pods still on the node when their group's share of
	// the deadline ran out (stuck terminating, or placed on the node
	// despite the taint); empty when the node was emptied.
	Left []string
	// requested are the pods asked for through EvictionRequests, whose
	// requests are withdrawn at the drain's end if they are still there.
	requested map[types.UID]*corev1.Pod
}

// podState is what the drain remembers of one pod it has acted on.
type podState struct {
	nextTry time.Time
	// evicted: the eviction was accepted; the cache may not show the
	// deletion yet, so the pod is not evicted again.
	evicted bool
	// inFlight: a call for the pod has not returned yet.
	inFlight bool
	// budgets is the version of the budgets covering the pod when it was
	// last refused or tried (budgets.allows): it is tried before nextTry
	// only once they have changed since and allow.
	budgets string
	// blocked: a budget refused it at least once; failure: the last
	// failure that was not a budget's (the eviction check unavailable, the
	// API server's error), said once in a Warning.
	blocked bool
	failure string
	// requested: an EvictionRequest asks for the pod, and its responders
	// have until fallbackAt; noRequest: one could not be written, so the
	// Eviction API is asked.
	requested, noRequest bool
	fallbackAt           time.Time
}

// refused: the eviction was refused or failed at least once, so the pod is
// deleted at its group deadline - grace - EscalationLead if it is still
// there.
// A pod asked for through an EvictionRequest is taken as refused from its
// fallback on.
func (st *podState) refused() bool { return st.blocked || st.failure != "" || st.requested }

// Drain evicts the node's pods group by group (workloads, then kube-system,
// then DaemonSet pods), each group only after every pod of the previous one
// is gone or the previous group's share of the deadline ran out.
//
// Deadlines: counted from deadline minus Timing.Margin, the workload
// group ends by that minus a reserve for the later groups, the system group
// by that minus the DaemonSet group's share, the DaemonSet group by that
// (see Timing.Reserve and GroupDeadlines). Every pod gets its own
// terminationGracePeriodSeconds, capped so that it ends by its group's
// deadline, and never less than GraceFloor.
//
// Refusals: each pod is retried on its own schedule, RetryInterval after
// its last refusal, whatever the other pods' calls are doing. A pod whose
// eviction a PodDisruptionBudget keeps refusing is deleted once
// now >= its group's deadline - its grace, so it still gets SIGTERM with
// its whole (capped) grace before the VM stops.
//
// The end: a group is done when none of its pods is left. Its pods are the
// ones on the node when the drain began, plus pods that arrive later and do
// not tolerate the impending-node-termination taint (bound to the node
// regardless); a pod that arrives later and tolerates it (a DaemonSet's
// replacement, an operator's pod that tolerates everything) would come back
// after every eviction and is left alone. Pods are taken from the
// watch-fed PodSource: a pod that is gone, or was recreated elsewhere, is
// not waited for. When a group's deadline passes with pods still there
// (stuck terminating, for example), the drain stops waiting for them with
// a Warning Event naming them and goes on with the next group; Drain then
// returns with Result.Left set.
//
// Drain returns when every group is done, or with ctx's error.
func (d *Drainer) Drain(ctx context.Context, deadline time.Time, why Disruption) (Result, error) {
	return d.run(ctx, deadline, &why)
}

// DrainVoluntary is Drain for a maintenance that did not have to happen
// now: PodDisruptionBudgets hold to the end. A pod whose eviction is
// refused is retried until its group's deadline and never deleted; if it
// is still there then, it is in Result.Left (and so are pods stuck
// terminating), and the caller decides what a drain that could not finish
// means.
func (d *Drainer) DrainVoluntary(ctx context.Context, deadline time.Time) (Result, error) {
	return d.run(ctx, deadline, nil)
}

// run drains by deadline; why is nil for a voluntary drain, which never
// deletes.
func (d *Drainer) run(ctx context.Context, deadline time.Time, why *Disruption) (Result, error) {
	var res Result
	ctx, stop := context.WithCancel(ctx)
	defer stop() // the budgets' watches
	pdbs := newBudgets(ctx, d.opts.Budgets, d.opts.Logger)
	start := d.opts.Clock.Now()
	began := make(map[types.UID]bool)
	for _, p := range d.opts.Pods.List() {
		began[p.UID] = true
	}
	defer func() { d.withdraw(ctx, res.requested) }()
	deadlines := GroupDeadlines(d.members(began), d.timing, d.opts.Clock.Now(), deadline)
	for i, g := range Groups {
		left, err := d.drainGroup(ctx, g, began, start, deadlines[i], why, pdbs, &res)
		if err != nil {
			return res, err
		}
		res.Left = append(res.Left, left...)
	}
	return res, nil
}

// members lists the pods the drain waits for (see member).
func (d *Drainer) members(began map[types.UID]bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range d.opts.Pods.List() {
		if _, ok := member(p, began, d.opts.Skip, d.opts.TaintKey); ok {
			out = append(out, p)
		}
	}
	return out
}

// action is one API call for a pod.
type action struct {
	pod        *corev1.Pod
	st         *podState
	grace      time.Duration // capped to the group deadline, at least GraceFloor
	escalateAt time.Time
	escalate   bool
	// request: asked through an EvictionRequest (Options.Requests).
	request bool
	outcome string
	// retryAfter is what the API server asked a throttled call to wait.
	retryAfter time.Duration
	// err is an OutcomeError call's error.
	err error
	at  time.Time // when it was planned
	// voluntary: never deleted; retried until deadline, its group's.
	voluntary bool
	deadline  time.Time
}

// drainGroup drains group g by its deadline and returns the pods it left.
func (d *Drainer) drainGroup(ctx context.Context, g Group, began map[types.UID]bool, start, deadline time.Time, why *Disruption, pdbs *budgets, res *Result) ([]string, error) {
	escalate := why != nil
	log := d.opts.Logger.With("group", g, "group_deadline", deadline)
	states := map[types.UID]*podState{}
	// seen is the budgets' generation the refused pods were last looked
	// at in.
	var seen uint64
	results := make(chan *action, parallelism)
	inFlight := 0
	// Calls still running when the group ends return into results, which
	// is drained before returning.
	defer func() {
		for ; inFlight > 0; inFlight-- {
			<-results
		}
	}()
	for {
		now := d.opts.Clock.Now()
		pods := d.pending(g, began)
		if len(pods) == 0 && inFlight == 0 {
			log.Info("drain group done")
			return nil, nil
		}
		if !now.Before(deadline.Add(EndSlack)) && inFlight == 0 {
			left := make([]string, 0, len(pods))
			for _, p := range pods {
				left = append(left, klogRef(p))
			}
			d.opts.Events.NodeEvent(true, protocol.EventGroupDeadline, fmt.Sprintf(
				"The %s pods' share of the drain deadline ended at %s with %d pod(s) still on the node (stuck terminating, or placed despite the taint); no longer waiting for: %s",
				g, deadline.UTC().Format(time.RFC3339), len(left), excerptList(left, 10)))
			log.Warn("drain group deadline passed with pods left", "left", left)
			return left, nil
		}
		if gen := pdbs.generation(); gen != seen {
			// A refused pod whose budgets changed and now allow: now.
			seen = gen
			for _, p := range pods {
				st := states[p.UID]
				if st == nil || !st.refused() || st.evicted || st.inFlight || !now.Before(st.nextTry) || now.Before(st.fallbackAt) {
					continue
				}
				if ok, v := pdbs.allows(p); ok && v != st.budgets {
					st.budgets, st.nextTry = v, now
				}
			}
		}
		due, wake := planRound(now, start, deadline, escalate, d.opts.Requests != nil, pods, states)
		for _, a := range due {
			if inFlight >= parallelism {
				break
			}
			inFlight++
			a.st.inFlight = true
			go func() {
				switch {
				case a.escalate:
					a.outcome = d.delete(ctx, a.pod, a.grace, *why)
				case a.request:
					a.outcome, a.err = d.request(ctx, a.pod)
				default:
					callCtx, cancel := callContext(ctx, a)
					a.outcome, a.retryAfter, a.err = d.evict(callCtx, a.pod, a.grace)
					cancel()
				}
				results <- a
			}()
		}
		if err := d.wait(ctx, wake, results, pdbs.Changed(), func(a *action) {
			inFlight--
			a.st.inFlight = false
			d.record(log, a, pdbs, res)
		}); err != nil {
			return nil, err
		}
	}
}

// callContext bounds an eviction of a drain that must end by the VM's stop
// to the pod's escalation: a call the API server holds (an admission
// webhook that does not answer) cannot delay the delete that keeps the
// pod's grace.
func callContext(ctx context.Context, a *action) (context.Context, context.CancelFunc) {
	if a.voluntary || !a.at.Before(a.escalateAt) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, a.escalateAt.Sub(a.at))
}

// parallelism bounds the API calls of one drain in flight at once.
const parallelism = 16

// pending lists the pods of group g the drain waits for (see Drain).
func (d *Drainer) pending(g Group, began map[types.UID]bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range d.opts.Pods.List() {
		if pg, ok := member(p, began, d.opts.Skip, d.opts.TaintKey); ok && pg == g {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return klogRef(out[i]) < klogRef(out[j]) })
	return out
}

// wait blocks until the pod cache changes, a call returns (handled by
// done), a followed budget changes, t comes, or ctx ends.
//
// A time already come fires at once, without a timer: a clock's timer of
// no duration may fire only when its clock next moves (a fake clock's
// does).
func (d *Drainer) wait(ctx context.Context, t time.Time, results <-chan *action, budgetChanged <-chan struct{}, done func(*action)) error {
	var fire <-chan time.Time
	if left := t.Sub(d.opts.Clock.Now()); left > 0 {
		timer := d.opts.Clock.NewTimer(left)
		defer timer.Stop()
		fire = timer.C()
	} else {
		now := make(chan time.Time, 1)
		now <- t
		fire = now
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.opts.Pods.Changed():
	case <-budgetChanged:
	case a := <-results:
		done(a)
	case <-fire:
	}
	return nil
}

// excerptList joins at most n names, saying how many more there are.
func excerptList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func klogRef(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
