package protocol

import (
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The Compute relay: by default no node holds a Compute Engine
// permission. An agent asks for the calls on its own VM through its Node,
// and the aggregator's leader, the one identity granted them, checks the
// ask against what it knows and makes the call: the agent writes the
// request (AnnotationComputeCall, AnnotationVMRead), the aggregator the
// answer (AnnotationComputeAnswer, AnnotationVMFacts), each naming the
// request it answers.
const (
	// AnnotationComputeCall is ComputeCall's JSON: the agent asks for a
	// call on its VM. It stands while the maintenance under way needs it.
	AnnotationComputeCall = "maintenance-handler.io/compute-call"
	// AnnotationComputeAnswer is ComputeAnswer's JSON: what Compute Engine
	// answered the aggregator's call, then how the call's operation ended.
	AnnotationComputeAnswer = "maintenance-handler.io/compute-answer"
	// AnnotationVMRead asks the aggregator to read the VM with
	// instances.get (its value is the ask's ID).
	AnnotationVMRead = "maintenance-handler.io/vm-read"
	// AnnotationVMFacts is VMFacts' JSON: what instances.get said of the
	// node's VM, for the ask it names.
	AnnotationVMFacts = "maintenance-handler.io/vm-facts"
)

// The calls an agent may ask for (ComputeCall.Method).
const (
	CallPerformMaintenance = "performMaintenance"
	CallReportHostAsFaulty = "reportHostAsFaulty"
	// CallGroupMaintenance: the maintenance of the reservation group the
	// VM runs in, at its sub-block's scope (SubBlock) or its block's.
	CallGroupMaintenance = "groupMaintenance"
)

// ComputeCall is an agent's ask.
type ComputeCall struct {
	// ID is the maintenance's request ID (AnnotationRequestID): the
	// aggregator calls with it, so that a call made twice is one.
	ID     string `json:"id"`
	Method string `json:"method"`
	// Behavior and Description are a report's.
	Behavior    string `json:"behavior,omitempty"`
	Description string `json:"description,omitempty"`
	// SubBlock: a group call at the sub-block's scope.
	SubBlock bool `json:"subBlock,omitempty"`
}

// ComputeAnswer is the aggregator's answer to the ComputeCall of the same
// ID.
type ComputeAnswer struct {
	ID string `json:"id"`
	// Operation names the call's operation; "" when Outcome says why
	// there is none.
	Operation string `json:"operation,omitempty"`
	// Outcome is "" when the call was accepted, else one of the manual
	// outcomes (ManualPermissionDenied, ManualRefused, ManualFailed), or
	// CallNotVouched when the aggregator would not make the call; Error
	// says why, in words.
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
	// Narrowed: a group call was made at the VM's scope instead, and
	// Error says why.
	Narrowed bool `json:"narrowed,omitempty"`
	// Done: the operation ended, at Ended; OperationError is its error
	// ("" when it succeeded).
	Done           bool      `json:"done,omitempty"`
	Ended          time.Time `json:"ended,omitzero"`
	OperationError string    `json:"operationError,omitempty"`
	// Unfollowed: the operation cannot be read (OperationError says why).
	Unfollowed bool `json:"unfollowed,omitempty"`
	// Boot is the node's boot ID when the aggregator made the call, and
	// Until how long the call's acceptance holds a place under the caps
	// (package fleet): the maintenance it began is over once the VM
	// booted again, or by then.
	Boot  string    `json:"boot,omitempty"`
	Until time.Time `json:"until,omitzero"`
}

// VouchedFor is how long an accepted call holds its node's place under
// the caps (ComputeAnswer.Until): the project's own bound, several times
// what the agent waits by default for a maintenance it asked for to begin
// and the node to be stopped (its --manual-start-timeout, then its
// --host-maintenance-deadline), so that a node whose agent never says the
// maintenance is over holds no place for ever.
const VouchedFor = 6 * time.Hour

// CallNotVouched is the outcome of a call the aggregator would not make:
// what the node asked is not what the aggregator knows of it.
const CallNotVouched = "not-vouched"

// VMFacts is what instances.get says of a node's VM.
type VMFacts struct {
	ID string `json:"id"`
	// Error says why the VM was not read; PermissionDenied when the
	// aggregator's identity lacks compute.instances.get.
	Error            string `json:"error,omitempty"`
	PermissionDenied bool   `json:"permissionDenied,omitempty"`

	Spot              bool      `json:"spot,omitempty"`
	PreemptionNotice  Duration  `json:"preemptionNotice,omitempty"`
	End               time.Time `json:"end,omitzero"`
	EndCause          string    `json:"endCause,omitempty"`
	MachineType       string    `json:"machineType,omitempty"`
	ProvisioningModel string    `json:"provisioningModel,omitempty"`
	Status            string    `json:"status,omitempty"`
	Reservation       string    `json:"reservation,omitempty"`
	Block             string    `json:"block,omitempty"`
	SubBlock          string    `json:"subBlock,omitempty"`
	// PhysicalBlock, PhysicalSubblock and PhysicalHost are the IDs of the
	// block, sub-block and host the VM runs on
	// (resourceStatus.physicalHostTopology), which GKE's gce-topology-*
	// labels mirror: what proves a node's reservation group
	// (Grouping.Unproven).
	PhysicalBlock    string `json:"physicalBlock,omitempty"`
	PhysicalSubblock string `json:"physicalSubblock,omitempty"`
	PhysicalHost     string `json:"physicalHost,omitempty"`
	// NodePool is the GKE node pool the VM was made for: the value of its
	// VMResourceLabelNodePool resource label ("" when it has none), which
	// GKE sets and the node cannot change. What proves a node's multi-host
	// slice (Grouping.Unproven).
	NodePool string `json:"nodePool,omitempty"`
}

// VMResourceLabelNodePool is the Compute Engine resource label (the
// instance's labels, not a Kubernetes label) GKE puts on every VM of a
// node pool, naming the pool: Google's Cloud Billing page "View and
// download the cost details of your invoice or statement"
// (https://cloud.google.com/billing/docs/how-to/cost-table) lists it
// among the label keys GKE's resources carry ("Filter cluster resources
// by node pool"), beside goog-k8s-cluster-name.
const VMResourceLabelNodePool = "goog-k8s-node-pool-name"

// ReadComputeCall reads n's ask; false when there is none or it cannot be
// read.
func ReadComputeCall(n *corev1.Node) (ComputeCall, bool) {
	var c ComputeCall
	ok := readJSON(n, AnnotationComputeCall, &c) && c.ID != "" &&
		(c.Method == CallPerformMaintenance || c.Method == CallReportHostAsFaulty || c.Method == CallGroupMaintenance)
	return c, ok
}

// ReadComputeAnswer reads the aggregator's answer on n; false when there
// is none or it cannot be read.
func ReadComputeAnswer(n *corev1.Node) (ComputeAnswer, bool) {
	var a ComputeAnswer
	return a, readJSON(n, AnnotationComputeAnswer, &a) && a.ID != ""
}

// ReadVMFacts reads the aggregator's answer to the node's VM read.
func ReadVMFacts(n *corev1.Node) (VMFacts, bool) {
	var f VMFacts
	return f, readJSON(n, AnnotationVMFacts, &f) && f.ID != ""
}

// Encode is v's JSON, for an annotation.
func Encode(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func readJSON(n *corev1.Node, key string, into any) bool {
	raw, ok := n.Annotations[key]
	return ok && json.Unmarshal([]byte(raw), into) == nil
}
