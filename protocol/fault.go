package protocol

// Faults: what says a node's accelerator or host is failing, the
// aggregator's approval of its repair, and the agent's record of the
// repair's call and of how the last repair ended.

import (
	"encoding/json"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The fault behaviors of Compute Engine's reportHostAsFaulty
// (faultReasons[].behavior).
const (
	// BehaviorChipError: an accelerator became unusable.
	BehaviorChipError = "CHIP_ERROR"
	// BehaviorPerformance: the host runs, slower than it should.
	BehaviorPerformance = "PERFORMANCE"
	// BehaviorSilentDataCorruption: the host computes wrong results.
	BehaviorSilentDataCorruption = "SILENT_DATA_CORRUPTION"
	// BehaviorUnrecoverableGPUError: a GPU reported an error it cannot
	// recover from (an XID).
	BehaviorUnrecoverableGPUError = "UNRECOVERABLE_GPU_ERROR"
)

// FaultBehaviors lists every behavior a fault may name.
var FaultBehaviors = []string{BehaviorChipError, BehaviorPerformance, BehaviorSilentDataCorruption, BehaviorUnrecoverableGPUError}

// ValidBehavior: b is one of FaultBehaviors.
func ValidBehavior(b string) bool { return slices.Contains(FaultBehaviors, b) }

// Where a fault was seen: the source label of the fault metrics.
const (
	// FaultSourceCondition: a node condition a detector wrote held for
	// the policy's duration.
	FaultSourceCondition = "condition"
	// FaultSourcePerson: a person asked (LabelReportFaulty).
	FaultSourcePerson = "person"
	// FaultSourcePrediction: GKE's node health prediction says the node
	// is likely to degrade soon (LabelHealthPrediction false), and it is
	// idle.
	FaultSourcePrediction = "prediction"
)

// FaultSources lists them.
var FaultSources = []string{FaultSourceCondition, FaultSourcePerson, FaultSourcePrediction}

// LabelHealthPrediction is GKE's node health prediction, on
// reservation-bound A3 Ultra, A4 and A4X nodes, refreshed every 10
// minutes: "false" says the node is likely to degrade within five hours.
const LabelHealthPrediction = "gke.google.com/recommended-to-run-large-training-workload"

// The keys of a fault's repair.
const (
	// LabelReportFaulty, set by a person (or `kubectl gce-maintenance
	// report-faulty`) to a fault behavior, asks for the node's repair.
	// The aggregator answers it: it approves the repair within the pool's
	// caps, or says why it waits. The request stands until the node is
	// repaired (its agent removes the label when the VM is back from the
	// repair) or the person removes the label, whatever Compute Engine
	// answered: a repair that failed is approved again after the pool's
	// cool-down. A value that names no behavior is removed at once.
	LabelReportFaulty = "maintenance-handler.io/report-faulty"
	// AnnotationReportFaultyDescription is the person's words for the
	// fault, sent to Compute Engine with the report (optional).
	AnnotationReportFaultyDescription = "maintenance-handler.io/fault-description"
	// TaintFaulty (NoSchedule, no value): the aggregator found the node
	// faulty. It keeps new pods off the node from the moment the fault is
	// seen, whether its repair starts now or waits for the pool's cap,
	// until the node is back from its repair and no longer faulty. Its
	// prefix makes it a status taint to cluster-autoscaler
	// (AutoscalerStatusTaintPrefix): a faulty node does not stop its pool
	// from growing.
	TaintFaulty = "status-taint.cluster-autoscaler.kubernetes.io/maintenance-handler-faulty"
	// AnnotationFaultRepair is RepairApproval's JSON: the aggregator approved
	// the node's repair; the node's agent drains it and asks Compute
	// Engine for the repair, and removes the annotation when the repair
	// is over.
	AnnotationFaultRepair = "maintenance-handler.io/fault-repair"
	// AnnotationRepairCall names the Compute Engine method the agent
	// chose for the repair under way (a RepairCall), written before the
	// call with the request ID.
	AnnotationRepairCall = "maintenance-handler.io/repair-call"
	// AnnotationGKEStatusBefore is what GKE's report-and-replace-status
	// label said when the agent asked GKE's flow for the repair under way
	// (GKEStatusNone for nothing): GKE leaves its last attempt's status on
	// the Node, so only a status other than this one is this attempt's.
	AnnotationGKEStatusBefore = "maintenance-handler.io/gke-status-before"
	// AnnotationLastFaultRepair is LastFaultRepair's JSON: how the node's
	// last repair ended, kept while the node lives (the aggregator's
	// cool-down reads it).
	AnnotationLastFaultRepair = "maintenance-handler.io/last-fault-repair"
)

// RepairApproval is the aggregator's approval of a node's repair.
type RepairApproval struct {
	// Behavior is the fault's (one of FaultBehaviors).
	Behavior string `json:"behavior"`
	// With says how the repair is asked for: RepairWithCompute (the
	// agent calls Compute Engine), RepairWithGKE (GKE's own flow, through
	// its fault-behavior label), or "" (auto: GKE's where the node
	// supports it).
	With string `json:"with,omitempty"`
	// Source is where it was seen (one of FaultSources), and Signal what
	// was seen, in words; both go to Compute Engine in the report's
	// description.
	Source string `json:"source"`
	Signal string `json:"signal,omitempty"`
	// Approved is when the aggregator approved the repair.
	Approved time.Time `json:"approved"`
	// DrainTimeout bounds the drain, from its start (the pool's policy).
	DrainTimeout Duration `json:"drain-timeout"`
	// Request is the request ID the approval buys a repair's call for: the
	// agent asks Compute Engine with it, and the aggregator's relay makes
	// only a call of that ID, once, then withdraws the approval. One
	// approval buys one report; another needs a new approval (within the
	// pool's caps and cool-down). Empty on an approval written before
	// approvals named their request: the agent then asks with a request
	// ID of its own, which the relay does not make.
	Request string `json:"request,omitempty"`
	// GKEOperationBefore is GKE's report-and-replace operation label as
	// the aggregator found it when it approved the repair ("" for none):
	// only another operation is this repair's (GKE leaves its last one).
	GKEOperationBefore string `json:"gke-operation-before,omitempty"`
}

// Description is what the report tells Compute Engine of the fault: where
// it was seen and what.
func (r RepairApproval) Description() string {
	d := "maintenance-handler: " + r.Source
	if r.Signal != "" {
		d += ": " + r.Signal
	}
	return d
}

// Duration is a time.Duration that reads and writes as "30m".
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// ReadRepairApproval reads n's approved repair: false when there is none, or
// when it cannot be read or names a behavior this version does not know
// (Unreadable names the key then): nothing is drained on a value no one
// understands.
func ReadRepairApproval(n *corev1.Node) (RepairApproval, bool) {
	raw, ok := n.Annotations[AnnotationFaultRepair]
	if !ok {
		return RepairApproval{}, false
	}
	return decodeRepairApproval(raw)
}

func decodeRepairApproval(raw string) (RepairApproval, bool) {
	var f RepairApproval
	if json.Unmarshal([]byte(raw), &f) != nil || !ValidBehavior(f.Behavior) || f.DrainTimeout <= 0 || !slices.Contains(RepairWith, f.With) {
		return RepairApproval{}, false
	}
	return f, true
}

// WriteRepairApproval approves n's repair, as the aggregator.
func WriteRepairApproval(n *corev1.Node, f RepairApproval) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	f.Approved = f.Approved.UTC()
	raw, _ := json.Marshal(f)
	n.Annotations[AnnotationFaultRepair] = string(raw)
}

// How a repair is asked for (RepairApproval.With).
const (
	RepairWithAuto    = ""
	RepairWithCompute = "compute"
	RepairWithGKE     = "gke"
)

// RepairWith lists them.
var RepairWith = []string{RepairWithAuto, RepairWithCompute, RepairWithGKE}

// RepairCall is how a repair asks: a Compute Engine method, or GKE's own
// flow.
type RepairCall string

const (
	// RepairGKE: GKE's report-and-replace flow, asked for with its
	// LabelFaultBehavior and followed through its status label.
	RepairGKE RepairCall = "gke-report-and-replace"
	// RepairReport: instances.reportHostAsFaulty.
	RepairReport RepairCall = "reportHostAsFaulty"
	// RepairPerformMaintenance: instances.performMaintenance, which pulls
	// a repair Compute Engine booked (a FAILURE_* maintenance) forward.
	RepairPerformMaintenance RepairCall = "performMaintenance"
)

// readRepairCall reads AnnotationRepairCall; a value it does not know is
// none.
func readRepairCall(s string) RepairCall {
	if c := RepairCall(s); c == RepairReport || c == RepairPerformMaintenance || c == RepairGKE {
		return c
	}
	return ""
}

// How a repair ended (the outcome of LastFaultRepair, and the outcome
// label of fault_repairs_total).
const (
	// RepairStarted: the drain began.
	RepairStarted = "started"
	// RepairAccepted: Compute Engine accepted the call.
	RepairAccepted = "accepted"
	// RepairDone: the VM stopped and came back.
	RepairDone = "repaired"
	// RepairFailed, RepairPermissionDenied, RepairRefused: the call
	// failed; the node stays faulty (the aggregator's taint) and its
	// repair is approved again after the cool-down.
	RepairFailed           = "failed"
	RepairPermissionDenied = "permission_denied"
	RepairRefused          = "refused"
	// RepairCancelled: the approval was removed before Compute Engine was
	// asked; the node went back in service.
	RepairCancelled = "cancelled"
	// RepairNotReportable: the repair would be a report, and the VM is
	// one Compute Engine refuses reports from (its machine type,
	// provisioning model or status): nothing was drained or asked; the
	// node stays faulty, its repair approved again after the cool-down.
	RepairNotReportable = "not_reportable"
	// RepairOvertaken: the VM stopped for something else (LastFaultRepair's
	// By) before or instead of its repair, or a preemption that took the
	// repair over was withdrawn: the host was not repaired. The
	// node stays faulty (a person's request stands, a condition stays
	// fresh), and its repair is approved again with no cool-down.
	RepairOvertaken = "overtaken"
)

// RepairOutcomes lists them.
var RepairOutcomes = []string{RepairStarted, RepairAccepted, RepairDone, RepairFailed, RepairPermissionDenied, RepairRefused, RepairCancelled, RepairNotReportable, RepairOvertaken}

// LastFaultRepair is the JSON of AnnotationLastFaultRepair.
type LastFaultRepair struct {
	Outcome string    `json:"outcome"`
	Ended   time.Time `json:"ended"`
	// Operation is read from agents before AgentState.Call, which holds
	// it now: a report's operation still RUNNING when the repair gave up
	// following it. It is never written.
	Operation string `json:"operation,omitempty"`
	// By names what took an overtaken repair over (RepairOvertaken): the
	// reason of the maintenance the VM stopped for, or OvertakenByReboot.
	By string `json:"by,omitempty"`
}

// OvertakenByReboot: the VM rebooted while its repair was drained, before
// Compute Engine was asked, with nothing announced.
const OvertakenByReboot = "reboot"

func (r LastFaultRepair) encode() string {
	if r.Outcome == "" {
		return ""
	}
	r.Ended = r.Ended.UTC()
	b, _ := json.Marshal(r)
	return string(b)
}

// ReadLastFaultRepair is how n's last fault repair ended (zero for none,
// or for a value that cannot be read).
func ReadLastFaultRepair(n *corev1.Node) LastFaultRepair {
	return decodeLastFaultRepair(n.Annotations[AnnotationLastFaultRepair])
}

func decodeLastFaultRepair(raw string) LastFaultRepair {
	var r LastFaultRepair
	if raw == "" || json.Unmarshal([]byte(raw), &r) != nil || !slices.Contains(RepairOutcomes, r.Outcome) {
		return LastFaultRepair{}
	}
	return r
}

// ConsumeReportFaulty removes a person's request for n's repair (and its
// description): answered by the repair, or refused for its value.
func ConsumeReportFaulty(n *corev1.Node) {
	delete(n.Labels, LabelReportFaulty)
	delete(n.Annotations, AnnotationReportFaultyDescription)
}

// ConsumeRepairApproval removes the approval once the agent is done with it.
func ConsumeRepairApproval(n *corev1.Node) {
	delete(n.Annotations, AnnotationFaultRepair)
}

// GKE's report-and-replace flow (GKE 1.32.3-gke.1057001 and later, on
// reservation-bound A3 High, A3 Mega, A3 Ultra, A4, A4X and later
// families): a label asks for it; GKE taints the node, evicts its pods,
// reports the host, waits for the VM to return, then clears its taint
// and the label; two labels of its own say how far it is.
const (
	// LabelFaultBehavior asks GKE to report the node's host (a
	// GKEBehavior value); the agent sets it on its own Node once the node
	// is drained, and removes it only if GKE's flow failed.
	LabelFaultBehavior = "cloud.google.com/fault-behavior"
	// LabelReportAndReplaceStatus is GKE's progress: one of the GKEStatus*
	// values.
	LabelReportAndReplaceStatus = "cloud.google.com/report-and-replace-status"
	// LabelReportAndReplaceOperation names GKE's Compute Engine operation.
	LabelReportAndReplaceOperation = "cloud.google.com/report-and-replace-operation"
)

// The values of LabelReportAndReplaceStatus.
const (
	GKEStatusPodsEvicted      = "PodsEvicted"
	GKEStatusOperationRunning = "OperationRUNNING"
	GKEStatusOperationDone    = "OperationDone"
	GKEStatusError            = "Error"
	// GKEStatusNone records that no status was on the Node
	// (AnnotationGKEStatusBefore).
	GKEStatusNone = "none"
)

// GKEBehavior is behavior as GKE's fault-behavior label spells it.
func GKEBehavior(behavior string) string {
	switch behavior {
	case BehaviorPerformance:
		return "PERFORMANCE"
	case BehaviorSilentDataCorruption:
		return "SDC"
	case BehaviorUnrecoverableGPUError:
		return "XID"
	}
	return "unspecified"
}
