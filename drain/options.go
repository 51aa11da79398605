package drain

// The drain's options, the small interfaces it consumes, and its defaults.

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Eviction outcomes, for Recorder.
const (
	OutcomeEvicted = "evicted" // the Eviction API accepted it
	OutcomeBlocked = "blocked" // 429 with a budget's cause: a PodDisruptionBudget refused, retried later
	// OutcomeThrottled: 429 without a budget's cause, the API server's own
	// rate limits (API Priority and Fairness, in a fleet-wide storm):
	// retried after its Retry-After, never taken for a budget's refusal.
	OutcomeThrottled = "throttled"
	OutcomeGone      = "gone"    // 404 or UID mismatch: the pod was already gone
	OutcomeError     = "error"   // any other failure, retried later
	OutcomeEscalated = "deleted" // deleted at deadline - grace - EscalationLead after refusals
)

// Recorder counts what the drain did. It is implemented by the metrics
// package.
type Recorder interface {
	// Eviction counts the outcome of one call for a pod.
	Eviction(outcome string)
	// Escalation counts a pod deleted after refused evictions (before its
	// OutcomeEscalated outcome).
	Escalation()
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

// DefaultRetryInterval is the delay before a refused eviction of one pod
// is tried again (see Options.RetryInterval).
const DefaultRetryInterval = 5 * time.Second

// DefaultReserve is the least share of the deadline kept for the system
// and DaemonSet groups after the workload group (see Timing.Reserve).
const DefaultReserve = 15 * time.Second

// DefaultMargin is the time kept between the end of every pod's grace
// and the VM's stop (see Timing.Margin): it covers the eviction call and
// the kubelet's delivery of SIGTERM, measured on a real kubelet at 0.2 to
// 0.5 s after the call as a rule and up to 2.0 s on a loaded two-core
// machine, with a second to spare (graces are rounded down to whole
// seconds, so none ends past its group's deadline).
const DefaultMargin = 3 * time.Second

// EndSlack is how long past its deadline a group still waits for its pods
// to go: SIGTERM reaches a pod a moment after its eviction, so its grace
// ends that moment past the deadline planned for it, and the kubelet
// reports a pod gone a moment after it stopped.
const EndSlack = 2 * time.Second

// GraceFloor is the least grace period the drain ever asks for: a grace of
// 0 is a force delete (the object goes while the containers still run).
const GraceFloor = time.Second

// API is the part of the Kubernetes API the drain calls; kube.Client
// implements it.
type API interface {
	// Evict asks the Eviction API to evict a pod.
	Evict(ctx context.Context, e *policyv1.Eviction) error
	// PatchPod patches a pod, or its subresource ("status") when given.
	PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource string) error
	// DeletePod deletes a pod.
	DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
}

// Disruption is what the drain tells a pod before it deletes it, in the
// pod's DisruptionTarget condition, as Kubernetes' own deleters do (the
// taint manager, the scheduler's preemption, the kubelet's shutdown): a
// Job's podFailurePolicy can then tell the node's maintenance from its
// own failure. The Eviction API sets the condition on the evictions it
// admits; a delete sets nothing, so the drain sets it first.
type Disruption struct {
	// Reason is the condition's reason (a protocol.DisruptionReasons
	// value), Message says which maintenance.
	Reason, Message string
}

// Options configure a Drainer.
type Options struct {
	Client API
	Pods   PodSource
	// Skip is a pod never evicted (the agent itself); zero skips none.
	Skip types.NamespacedName
	// RetryInterval is the delay before a refused (429) or failed eviction
	// of one pod is tried again, counted for each pod on its own; zero
	// means 5 s. With Budgets, a refused pod is tried again as soon as
	// its budgets allow, and the interval is only the fallback.
	RetryInterval time.Duration
	// Budgets, when set, lists and watches a namespace's
	// PodDisruptionBudgets: a pod whose eviction a budget refused is tried
	// again the moment every budget covering it allows a disruption, once
	// per change of those budgets (never a request per pod more than the
	// budgets change). A namespace is watched from its first refusal to
	// the drain's end.
	Budgets BudgetSource
	// Timing is how the drain spends the time to its deadline (its
	// reserve and margin); nil means DefaultTiming. In a Timing, as on the
	// agent's command line, a zero reserve or margin keeps none.
	Timing *Timing
	// Requests, when set, is the EvictionRequest API: a pod that names
	// eviction responders (NamesResponders) is asked for through an
	// EvictionRequest first, its responders have until the last moment
	// that leaves it its grace before its group's deadline, and the
	// request is withdrawn if the drain ends without the pod. Nil: every
	// pod is asked through the Eviction API.
	Requests Requests
	// TaintKey is the NoSchedule taint the node carries while it drains: a
	// pod that arrives after the drain began and tolerates it is left
	// alone. Empty: only a DaemonSet's late pods are.
	TaintKey string
	Clock    clock.Clock
	Logger   *slog.Logger
	Recorder Recorder
	Events   EventSink
}

type nopRecorder struct{}

func (nopRecorder) Eviction(string) {}

func (nopRecorder) Escalation() {}

func (nopRecorder) NodeEvent(bool, string, string) {}
