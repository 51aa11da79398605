package aggregator

// The aggregator's options and their defaults.

import (
	"errors"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// fieldManager names the aggregator's writes.
const fieldManager = "maintenance-handler-aggregator"

// Options configure an Aggregator. Client, Leases, Namespace and Identity
// are required; every other zero field takes its value from Default.
type Options struct {
	// Client reads and writes Nodes and reads ConfigMaps; Leases holds the
	// leader Lease and the claims Lease.
	Client *kube.Client
	Leases coordinationv1client.LeasesGetter
	// EventClient writes the Events (nil: Client). A client of its own has
	// its own rate limit, so that a flood of Events (a new leader says why
	// of every node with a pending notice) never delays a trigger.
	EventClient *kube.Client
	// Namespace holds the Lease and the ConfigMap.
	Namespace string
	// ConfigMap names the ConfigMap whose policy.yaml is the Config; empty
	// means none (the nodes' annotations only).
	ConfigMap string
	// LeaseName names the Lease; Identity is this replica's holder name.
	LeaseName, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader
	// election's (client-go's leaderelection).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// PoolLabel names a node's pool.
	PoolLabel string
	// SliceLabel, when set, names a node's multi-host slice (a self-managed
	// cluster's own label); empty: GKE's rule, a TPU pool whose topology
	// has more chips than one node (protocol.SliceOf).
	SliceLabel string
	// ReservationGroups is protocol.Grouping.Reservation: whether the
	// nodes of a reservation's sub-block or block, by GKE's topology
	// labels, are maintained as one group ("" for no).
	ReservationGroups string
	// Reservations, when set, are read by the leader every
	// ReservationInterval with ReservationReader (reservations.go).
	Reservations        []compute.Reservation
	ReservationReader   ReservationReader
	ReservationInterval time.Duration
	// MaintainUnusedCapacity: a block of Reservations whose maintenance
	// is pending and which has spare hosts has their maintenance started
	// first (reservationBlocks.performMaintenance, UNUSED_CAPACITY).
	MaintainUnusedCapacity bool
	// Caller, when set, makes the Compute Engine calls agents ask for
	// through their Nodes (relay.go); nil: none is made, and the agents
	// must hold the permissions themselves.
	Caller VMCaller
	// Home is the project and the regions of the cluster's VMs: the relay
	// calls only on a VM in them (zero: on none).
	Home Home
	// RelayClient writes the relay's answers (nil: Client). A client of
	// its own has its own rate limit, so that a flood of asks never
	// delays a pass's writes.
	RelayClient *kube.Client
	// RelayRate is how many Compute Engine calls and VM reads the relay
	// makes for one node per hour, with a burst of as many (zero:
	// DefaultRelayRate): a node that rotates its asks' IDs costs the
	// project's quota no more.
	RelayRate int
	// NewRequestID names the request a repair's approval buys (nil: a
	// random UUID).
	NewRequestID func() string
	// Notify, when set, is the webhook the leader tells each step of each
	// node's maintenance (notify.go).
	Notify *NotifyOptions
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
	// RepairAskGrace: an approved repair whose agent has asked for no
	// report by its drain timeout and this grace after the approval
	// lapses: it is withdrawn and takes no place of its pool's
	// (fleet.Node.ExpireRepair).
	RepairAskGrace time.Duration
	// AdoptGKEConfig: act on the opportunistic-config annotation of nodes
	// where GKE's own maintenance handler does too (GKE 1.31 and later).
	// False: those are left to GKE; a pool configured in the policy
	// ConfigMap is the aggregator's either way.
	AdoptGKEConfig bool
	// NodesCallCompute: the agents make their own Compute Engine calls
	// (their --compute-caller node), so every node's VM identity may stop
	// any VM of the project: a host's forced maintenance moves its slice
	// on its agent's word, unconfirmed (confirm.go).
	NodesCallCompute bool
	// ObserveOnly: every node is observed only (observe.go); the policy's
	// observeOnly does it per pool.
	ObserveOnly bool
	// AgentNamespace holds the agents and the observed nodes' Leases
	// (observe.go); "" reads none.
	AgentNamespace string
	// AutoscalerStatus is the cluster autoscaler's status ConfigMap,
	// namespace/name, from which the pools it manages are found; empty
	// means none is read.
	AutoscalerStatus string
	// PodRanges, when set, is told the pod ranges (spec.podCIDRs) of each
	// Node the Node watch adds or changes, and nil for one it deletes,
	// before the aggregator handles the change: the listeners' shares per
	// node (cli.NodeRanges).
	PodRanges func(node string, podCIDRs []string)
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
	RecreateWindow: time.Hour, TriggerAnswerTimeout: 10 * time.Minute, RepairAskGrace: 10 * time.Minute,
	ReservationInterval: 5 * time.Minute,
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
	fill(&o.RepairAskGrace, Default.RepairAskGrace)
	fill(&o.ReservationInterval, Default.ReservationInterval)
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
	if o.RelayRate <= 0 {
		o.RelayRate = DefaultRelayRate
	}
	if o.NewRequestID == nil {
		o.NewRequestID = func() string { return string(uuid.NewUUID()) }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ErrInvalidOptions is returned by New for Options missing a required
// field.
var ErrInvalidOptions = errors.New("invalid aggregator options")

// grouping is what makes a node's group (protocol.Grouping).
func (o Options) grouping() protocol.Grouping {
	return protocol.Grouping{PoolLabel: o.PoolLabel, SliceLabel: o.SliceLabel, Reservation: o.ReservationGroups}
}
