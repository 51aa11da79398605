package drain

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Eviction outcomes, for Recorder.
const (
	OutcomeEvicted   = "evicted" // the Eviction API accepted it
	OutcomeBlocked   = "blocked" // 429: a PodDisruptionBudget refused, retried later
	OutcomeGone      = "gone"    // 404 or UID mismatch: the pod was already gone
	OutcomeError     = "error"   // any other failure, retried later
	OutcomeEscalated = "deleted" // deleted at deadline - grace after refusals
)

// Group is one ordered step of a drain.
type Group string

const (
	GroupWorkload  Group = "workload"  // every namespace but kube-system
	GroupSystem    Group = "system"    // kube-system
	GroupDaemonSet Group = "daemonset" // pods owned by a DaemonSet
)

// Groups is the drain order.
var Groups = []Group{GroupWorkload, GroupSystem, GroupDaemonSet}

// Recorder counts what the drain did. It is implemented by the metrics
// package.
type Recorder interface {
	Eviction(outcome string)
}

// EventSink records Kubernetes Events about the drain on the Node.
type EventSink interface {
	NodeEvent(warning bool, reason, message string)
}

// PodSource lists the pods bound to the node from a watch-fed cache and
// signals changes. See NodePods.
type PodSource interface {
	List() []*corev1.Pod
	Changed() <-chan struct{}
}

// Event reasons.
const (
	EventEscalated = "EvictionEscalatedToDelete"
	EventBlocked   = "EvictionBlockedByPDB"
)

// Options configure a Drainer.
type Options struct {
	Client kubernetes.Interface
	Pods   PodSource
	// Skip is a pod never evicted (the agent itself); zero skips none.
	Skip types.NamespacedName
	// RetryInterval is the delay before a refused (429) or failed eviction
	// is tried again; zero means 5 s.
	RetryInterval time.Duration
	Clock         clock.Clock
	Logger        *slog.Logger
	Recorder      Recorder
	Events        EventSink
}

// Drainer empties one node.
type Drainer struct {
	opts Options
}

// New returns a Drainer.
func New(opts Options) *Drainer {
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 5 * time.Second
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
	return &Drainer{opts: opts}
}

type nopRecorder struct{}

func (nopRecorder) Eviction(string)                {}
func (nopRecorder) NodeEvent(bool, string, string) {}

// Result summarises a drain.
type Result struct {
	Evicted, Deleted int
}

// GroupOf tells which drain group a pod belongs to, and false for pods the
// drain never touches: mirror (static) pods and finished pods.
func GroupOf(p *corev1.Pod) (Group, bool) {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return "", false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return "", false
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return GroupDaemonSet, true
	}
	if p.Namespace == metav1.NamespaceSystem {
		return GroupSystem, true
	}
	return GroupWorkload, true
}

// podState is what the drain remembers of one pod it has acted on.
type podState struct {
	nextTry time.Time
	// refused: the eviction was refused or failed at least once, so the
	// pod is deleted at deadline - grace if it is still there.
	refused bool
	// evicted: the eviction was accepted; the cache may not show the
	// deletion yet, so the pod is not evicted again.
	evicted bool
}

// Drain evicts the node's pods group by group (workloads, then kube-system,
// then DaemonSet pods), each group only after every pod of the previous one
// is gone. Every pod gets its own terminationGracePeriodSeconds, capped so
// that it ends by deadline. A pod whose eviction a PodDisruptionBudget keeps
// refusing is deleted once now >= deadline - its grace, so it still gets
// SIGTERM with its whole (capped) grace before the VM stops. Pods are taken
// from the watch-fed PodSource each round: a pod that is gone, or was
// recreated elsewhere, is not waited for. A DaemonSet pod created after the
// drain began (the controller replacing one) is left alone.
//
// Drain returns when every group is empty, or with ctx's error.
func (d *Drainer) Drain(ctx context.Context, deadline time.Time) (Result, error) {
	var res Result
	began := d.opts.Clock.Now()
	for _, g := range Groups {
		if err := d.drainGroup(ctx, g, began, deadline, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// action is one API call a drain round makes for a pod.
type action struct {
	pod        *corev1.Pod
	st         *podState
	grace      time.Duration // capped to the deadline
	escalateAt time.Time
	escalate   bool
	outcome    string
}

func (d *Drainer) drainGroup(ctx context.Context, g Group, began, deadline time.Time, res *Result) error {
	log := d.opts.Logger.With("group", g)
	states := map[types.UID]*podState{}
	for {
		now := d.opts.Clock.Now()
		pods := d.pending(g, began)
		if len(pods) == 0 {
			log.Info("drain group done")
			return nil
		}
		wake := now.Add(time.Hour)
		var actions []*action
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue // stopping: wait for it to go
			}
			st := states[p.UID]
			if st == nil {
				st = &podState{}
				states[p.UID] = st
			}
			if st.evicted {
				continue
			}
			grace := podGrace(p)
			// Whole seconds, rounded up: a pod deleted at deadline - grace
			// gets all of its grace, ending at most a moment past deadline.
			left := deadline.Sub(now).Truncate(time.Second)
			if left < deadline.Sub(now) {
				left += time.Second
			}
			a := &action{pod: p, st: st, grace: min(grace, max(left, 0)), escalateAt: deadline.Add(-grace)}
			switch {
			case st.refused && !now.Before(a.escalateAt):
				a.escalate = true
			case now.Before(st.nextTry):
				wake = earliest(wake, st.nextTry)
				if st.refused {
					wake = earliest(wake, a.escalateAt)
				}
				continue
			}
			actions = append(actions, a)
		}
		d.run(ctx, actions)
		for _, a := range actions {
			p, st := a.pod, a.st
			if a.escalate {
				if a.outcome == OutcomeEscalated {
					res.Deleted++
					d.opts.Events.NodeEvent(true, EventEscalated, fmt.Sprintf(
						"Pod %s was still protected by a PodDisruptionBudget at the last moment that leaves it its %s grace period before the VM stops; deleted it",
						klogRef(p), a.grace))
					log.Warn("pod deleted after refused evictions", "pod", klogRef(p), "grace", a.grace)
				}
				d.opts.Recorder.Eviction(a.outcome)
				st.evicted = a.outcome != OutcomeError
				continue
			}
			d.opts.Recorder.Eviction(a.outcome)
			switch a.outcome {
			case OutcomeEvicted:
				st.evicted = true
				res.Evicted++
				log.Info("pod evicted", "pod", klogRef(p), "grace", a.grace)
			case OutcomeBlocked:
				if !st.refused {
					msg := fmt.Sprintf("Eviction of pod %s is refused by a PodDisruptionBudget; retrying, and deleting it at %s so that it still gets its %s grace period",
						klogRef(p), a.escalateAt.UTC().Format(time.RFC3339), a.grace)
					if !now.Before(a.escalateAt) {
						msg = fmt.Sprintf("Eviction of pod %s is refused by a PodDisruptionBudget, and its %s grace period no longer fits before the VM stops; deleting it now, with the %s left",
							klogRef(p), podGrace(p), a.grace)
					}
					d.opts.Events.NodeEvent(true, EventBlocked, msg)
				}
				st.refused = true
				st.nextTry = now.Add(d.opts.RetryInterval)
				wake = earliest(wake, earliest(st.nextTry, a.escalateAt))
			case OutcomeError:
				st.refused = true
				st.nextTry = now.Add(d.opts.RetryInterval)
				wake = earliest(wake, earliest(st.nextTry, a.escalateAt))
			}
		}
		if err := d.wait(ctx, wake); err != nil {
			return err
		}
	}
}

// parallelism bounds the API calls of one drain round in flight at once.
const parallelism = 16

// run makes the round's calls concurrently, the pods with the longest
// grace first: they are the ones that decide when the node is empty.
func (d *Drainer) run(ctx context.Context, actions []*action) {
	sort.SliceStable(actions, func(i, j int) bool { return actions[i].grace > actions[j].grace })
	sem := make(chan struct{}, parallelism)
	var wg sync.WaitGroup
	for _, a := range actions {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if a.escalate {
				a.outcome = d.delete(ctx, a.pod, a.grace)
			} else {
				a.outcome = d.evict(ctx, a.pod, a.grace)
			}
		}()
	}
	wg.Wait()
}

// pending lists the pods of group g still on the node.
func (d *Drainer) pending(g Group, began time.Time) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range d.opts.Pods.List() {
		if p.Namespace == d.opts.Skip.Namespace && p.Name == d.opts.Skip.Name {
			continue
		}
		pg, ok := GroupOf(p)
		if !ok || pg != g {
			continue
		}
		if g == GroupDaemonSet && p.CreationTimestamp.Time.After(began) {
			continue // a replacement made by the DaemonSet controller
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return klogRef(out[i]) < klogRef(out[j]) })
	return out
}

// wait blocks until the pod cache changes, until t, or until ctx ends.
func (d *Drainer) wait(ctx context.Context, t time.Time) error {
	timer := d.opts.Clock.NewTimer(max(t.Sub(d.opts.Clock.Now()), 0))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.opts.Pods.Changed():
	case <-timer.C():
	}
	return nil
}

func (d *Drainer) evict(ctx context.Context, p *corev1.Pod, grace time.Duration) string {
	secs := int64(grace / time.Second)
	err := d.opts.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case err == nil:
		return OutcomeEvicted
	case apierrors.IsTooManyRequests(err):
		return OutcomeBlocked
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or a different pod of the same name (recreated).
		return OutcomeGone
	default:
		d.opts.Logger.Warn("eviction failed", "pod", klogRef(p), "err", err)
		return OutcomeError
	}
}

// delete deletes a pod whose eviction kept being refused until
// deadline - grace.
func (d *Drainer) delete(ctx context.Context, p *corev1.Pod, grace time.Duration) string {
	secs := int64(grace / time.Second)
	err := d.opts.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &p.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		d.opts.Logger.Warn("delete after refused evictions failed", "pod", klogRef(p), "err", err)
		return OutcomeError
	}
	return OutcomeEscalated
}

// podGrace is the pod's terminationGracePeriodSeconds (30 s if unset).
func podGrace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func klogRef(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
