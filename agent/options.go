package agent

// The agent's options and the small interfaces it consumes.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/gentype"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
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
	// FaultRepair counts one outcome of a fault's repair (a
	// protocol.Repair* value), by the fault's behavior; RepairDuration
	// observes the time from its approval to the VM's return.
	FaultRepair(behavior, source, outcome string)
	RepairDuration(d time.Duration)
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
	// ResourceSliceListWatch lists and watches the ResourceSlices of the
	// node's devices: their drivers' taints (device health).
	ResourceSliceListWatch(node string) kube.ListWatch
	// DeviceTaintRules are the cluster's DeviceTaintRules: the agent keeps
	// its node's devices tainted while a maintenance is under way.
	DeviceTaintRules() *gentype.ClientWithList[*resourcev1.DeviceTaintRule, *resourcev1.DeviceTaintRuleList]
	// GetResourceClaim reads a ResourceClaim a pod on the node uses: the
	// devices it holds through dynamic resource allocation (idleness).
	GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error)
	drain.API
}

// NodeGetter reads a Node.
type NodeGetter interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// DefaultAcceleratorResources are the resources that make a pod accelerator
// work.
var DefaultAcceleratorResources = []corev1.ResourceName{protocol.ResourceGPU, protocol.ResourceTPU}

// LeaseAPI is the part of the Kubernetes API an observed node's agent
// calls to keep its Lease; kube.Client implements it.
type LeaseAPI interface {
	Leases(namespace string) *gentype.ClientWithList[*coordinationv1.Lease, *coordinationv1.LeaseList]
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
	// Relay, when Maintainer is it, is attached to the agent: it asks
	// through the agent's Node and reads the answers from its watch.
	Relay *Relay
	// Schedule, when set, tells what the VM's own clock says (its
	// preemption notice and known end), or fails: asked once at start,
	// again with backoff after an error but for a missing permission
	// (said, and the 30 s rule kept). Nil: neither is known.
	Schedule func(context.Context) (Schedule, error)
	// NewRequestID returns a fresh performMaintenance requestId (a UUID);
	// nil means a random UUID.
	NewRequestID func() string
	// ManualGate, when set, says why the maintenance policy refuses a
	// manual trigger on the node now (a Manual* outcome and a detail; ""
	// when it does not).
	ManualGate func(node *corev1.Node, now time.Time) (reason, detail string)
	// ObserveOnly, when set, says whether node is observed only (on), once
	// it can tell (decided; until then it is): its maintenance is decided
	// and said, and nothing changed (observe.go). Asked at every step.
	ObserveOnly func(node *corev1.Node) (on, decided bool)
	// Leases and ShadowNamespace, when set, keep an observed node's
	// unmade writes on a Lease named as the node in that namespace (the
	// agents'), where the aggregator reads them and a restarted agent
	// finds them again.
	Leases          LeaseAPI
	ShadowNamespace string
	// PoolLabel and SliceLabel say which multi-host slice the node belongs
	// to (protocol.SliceOf); PoolLabel "" means protocol.LabelNodePool.
	// The agent follows the other hosts of its slice (slice.go).
	PoolLabel, SliceLabel string
	// ReservationGroups is protocol.Grouping.Reservation: whether the
	// nodes of a reservation's sub-block or block, by GKE's topology
	// labels, are maintained as one group ("" for no).
	ReservationGroups string
	// AcceleratorResources make a pod accelerator work (see idleness); nil
	// means DefaultAcceleratorResources.
	AcceleratorResources []corev1.ResourceName
	// AcceleratorDeviceClasses are the DRA device classes whose devices,
	// held through a pod's ResourceClaim, make it accelerator work (see
	// idleness); nil means DefaultAcceleratorDeviceClasses.
	AcceleratorDeviceClasses []string
	// RetryInterval is the delay between refused evictions when the
	// budgets that refused them do not change (drain.Options).
	RetryInterval time.Duration
	// DrainTiming is the drain's reserve for system and DaemonSet pods and
	// its margin before the deadline (drain.Timing: a zero keeps none);
	// nil is drain.DefaultTiming.
	DrainTiming *drain.Timing
	// EvictionRequests, when set, is the EvictionRequest API the drain asks
	// through for a pod that names eviction responders (drain.Options;
	// --eviction-requests); nil: the Eviction API alone.
	EvictionRequests drain.Requests
	// Drainer empties the node; nil is a drain.Drainer of the node's Pods
	// with RetryInterval, DrainTiming and EvictionRequests.
	Drainer Drainer
	Metrics Metrics
	Events  Events
	Clock   clock.Clock
	Logger  *slog.Logger
}

// ErrInvalidOptions is returned by New for Options missing a required
// field.
var ErrInvalidOptions = errors.New("invalid agent options")

// nopMetrics records nothing: the metrics and Events of an Agent given none.
type nopMetrics struct{}

func (nopMetrics) Escalation() {}

func (nopMetrics) Eviction(string) {}

func (nopMetrics) AddInterruptions(protocol.Interruption, int) {}

func (nopMetrics) Migration() {}

func (nopMetrics) Unrecognized(string) {}

func (nopMetrics) TaintLatency(time.Duration) {}

func (nopMetrics) DrainDuration(time.Duration) {}

func (nopMetrics) SetPhase(protocol.Phase) {}

func (nopMetrics) ManualTrigger(string) {}

func (nopMetrics) PermissionDenied(string) {}

func (nopMetrics) SetNode(time.Time, time.Time, bool) {}

func (nopMetrics) SetFailures(int) {}

func (nopMetrics) FaultRepair(string, string, string) {}

func (nopMetrics) RepairDuration(time.Duration) {}

func (nopMetrics) NodeEvent(bool, string, string) {}
