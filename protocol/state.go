package protocol

import (
	"encoding/json"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
)

// AgentState is what the agent keeps on its Node.
type AgentState struct {
	Phase  Phase
	Reason Reason
	// Started and Deadline are set while Draining or Terminating.
	Started, Deadline time.Time
	// BootID is the node's boot ID when maintenance started.
	BootID string
	// CordonedBefore: spec.unschedulable was set before maintenance began.
	CordonedBefore bool
	// ScheduledTime is the scheduled-maintenance-time label ("" if absent).
	ScheduledTime string
	// Notice is the upcoming-maintenance annotation, decoded once when
	// read (ReadNotice): Notice.Raw is the annotation as it stands ("" if
	// absent), and Notice.Status is "" when it holds no notice or one that
	// cannot be read (Unreadable names the key then).
	Notice maintenance.Notice
	// LastEvent is the last maintenance-event value acted on.
	LastEvent maintenance.Event
	// Begun: Compute Engine was seen to begin the manual maintenance under
	// way (it is counted), or, on a host of a multi-host slice whose own
	// maintenance began as its slice's voluntary one (another host asked
	// for it, and counts it), that one; set only while active.
	Begun bool
	// NoticeDone is the window start (Unix seconds) of the ONGOING notice
	// whose maintenance already stopped the VM ("" when none).
	NoticeDone string
	// RequestID is the performMaintenance requestId of a manual
	// maintenance, chosen when it starts.
	RequestID string
	// Requested is when the agent first asked Compute Engine to start the
	// maintenance (written before the call).
	Requested time.Time
	// Call is the Compute Engine call the agent made last, while Compute
	// Engine may still carry it out (AnnotationOperation): kept whatever
	// the phase, so that no maintenance calls again meanwhile.
	Call Call
	// IdleSince is when the node last became idle; zero while it is busy,
	// and Busy says why.
	IdleSince time.Time
	Busy      string
	// PodGroups are the pod groups the node's running pods are in
	// (AnnotationPodGroups), which the aggregator checks before it puts
	// the node in their gang.
	PodGroups []PodGroupClaim
	// Interruptions counts the interruptions the agent saw, for as long as
	// the Node object lives.
	Interruptions Counts
	// LastBootID and LastKubelet are the boot ID and kubelet version the
	// agent last saw the node run.
	LastBootID, LastKubelet string
	// Failures are the voluntary maintenances that failed in a row.
	Failures Failures
	// LeftToGKE: the maintenance under way is left to GKE's own handler
	// (AnnotationLeftToGKE); set only while active.
	LeftToGKE bool
	// NoticeForeign: ScheduledTime and Notice were written by another
	// controller (GKE's handler mirrors the notice on the same keys), not
	// by the agent (AnnotationNoticeMirrored is absent): the agent leaves
	// them as they are until it mirrors a notice of its own.
	NoticeForeign bool
	// Drain says how the drain of the maintenance under way ended (""
	// while it runs); set only while active, for the hosts of a
	// multi-host slice, which wait for each other (AnnotationDrain).
	Drain DrainEnd
	// RepairCall is the Compute Engine method a fault's repair asks with
	// (AnnotationRepairCall), chosen and written before the call; set
	// only while active.
	RepairCall RepairCall
	// GKEStatusBefore is GKE's report-and-replace-status when the agent
	// asked GKE's flow for the repair under way
	// (AnnotationGKEStatusBefore; GKEStatusNone for none, "" when not
	// recorded); set only while active.
	GKEStatusBefore string
	// LastRepair is how the node's last fault repair ended
	// (AnnotationLastFaultRepair).
	LastRepair LastFaultRepair
	// KnownEnd is the VM's known end, as the agent last learned it
	// (LabelKnownEnd); zero when none is known.
	KnownEnd time.Time
}

// DrainEnd is how a drain ended: the value of AnnotationDrain.
type DrainEnd string

const (
	// DrainDone: every pod the drain stops is gone.
	DrainDone DrainEnd = "done"
	// DrainIncomplete: a voluntary drain reached its deadline with pods
	// its PodDisruptionBudgets still held (or stuck terminating).
	DrainIncomplete DrainEnd = "incomplete"
)

// Failures is the JSON of AnnotationVoluntaryFailures.
type Failures struct {
	// Count failed in a row (0: none since the last that went through).
	Count int `json:"count"`
	// Reason is the last failure's outcome (a Manual* value), at Last.
	Reason string    `json:"reason,omitempty"`
	Last   time.Time `json:"last,omitempty"`
	// RetryAfter: the node is not picked for opportunistic maintenance
	// again before it.
	RetryAfter time.Time `json:"retry-after,omitempty"`
}

func (f Failures) encode() string {
	if f.Count == 0 {
		return ""
	}
	f.Last, f.RetryAfter = f.Last.UTC(), f.RetryAfter.UTC()
	b, _ := json.Marshal(f)
	return string(b)
}

func decodeFailures(raw string) Failures {
	var f Failures
	if raw == "" || json.Unmarshal([]byte(raw), &f) != nil || f.Count <= 0 {
		return Failures{}
	}
	return f
}

// Active: maintenance is under way.
func (st AgentState) Active() bool { return st.Phase == PhaseDraining || st.Phase == PhaseTerminating }

// ManualBegun: a manual (or opportunistic) maintenance waits for the VM's
// stop, and Compute Engine was seen to begin it (it is counted).
func (st AgentState) ManualBegun() bool {
	return st.Reason == ReasonManual && st.Phase == PhaseTerminating && st.Begun
}

// ReadAgentState reads the agent's state from n. A phase it does not know
// reads as PhaseIdle, and an idle node has no maintenance's keys; a time it
// cannot parse reads as zero.
func ReadAgentState(n *corev1.Node) AgentState {
	st, _ := readAgentState(n)
	return st
}

// ReadAgentStateAndUnreadable is ReadAgentState(n) and Unreadable(n), the
// notice parsed once for both.
func ReadAgentStateAndUnreadable(n *corev1.Node) (AgentState, []string) {
	st, noticeUnreadable := readAgentState(n)
	return st, unreadable(n, func(string) bool { return !noticeUnreadable })
}

// readAgentState is ReadAgentState, and whether the notice on n cannot be
// read.
func readAgentState(n *corev1.Node) (st AgentState, noticeUnreadable bool) {
	a := n.Annotations
	st = AgentState{
		Phase:           Phase(a[AnnotationPhase]),
		Reason:          Reason(a[AnnotationReason]),
		BootID:          a[AnnotationBootID],
		CordonedBefore:  a[AnnotationCordonedBefore] == "true",
		LastEvent:       maintenance.Event(a[AnnotationLastEvent]),
		NoticeDone:      a[AnnotationNoticeDone],
		Begun:           a[AnnotationBegun] == "true",
		RequestID:       a[AnnotationRequestID],
		Busy:            a[AnnotationBusy],
		Started:         readTime(a[AnnotationStarted]),
		Deadline:        readTime(a[AnnotationDeadline]),
		Requested:       readTime(a[AnnotationRequested]),
		IdleSince:       readTime(a[AnnotationIdleSince]),
		Interruptions:   decodeCounts(a[AnnotationInterruptions]),
		LastBootID:      a[AnnotationLastBootID],
		LastKubelet:     a[AnnotationKubeletVersion],
		Failures:        decodeFailures(a[AnnotationVoluntaryFailures]),
		LeftToGKE:       a[AnnotationLeftToGKE] == "true",
		Drain:           readDrainEnd(a[AnnotationDrain]),
		RepairCall:      readRepairCall(a[AnnotationRepairCall]),
		GKEStatusBefore: a[AnnotationGKEStatusBefore],
		LastRepair:      decodeLastFaultRepair(a[AnnotationLastFaultRepair]),
		PodGroups:       ReadPodGroups(n),
	}
	if !st.Active() {
		// The keys of a maintenance under way mean nothing without one.
		st.Phase, st.LeftToGKE, st.Drain = PhaseIdle, false, ""
		st.Reason, st.Started, st.Deadline, st.BootID, st.CordonedBefore = "", time.Time{}, time.Time{}, "", false
		st.RequestID, st.Requested, st.Begun, st.RepairCall, st.GKEStatusBefore = "", time.Time{}, false, "", ""
	}
	st.Call = readCall(a[AnnotationOperation], &st)
	st.ScheduledTime = n.Labels[LabelScheduledMaintenanceTime]
	st.Notice, noticeUnreadable = readNotice(a[AnnotationUpcomingMaintenance])
	st.KnownEnd = ReadKnownEnd(n)
	// The notice keys are the agent's only while it mirrors them: GKE's
	// handler writes the same keys. Keys an agent of a version before the
	// record wrote (its field manager owns them) are the agent's too: they
	// are adopted, and the record written, at the next write (migrated
	// once), rather than left as another controller's for ever.
	st.NoticeForeign = (st.ScheduledTime != "" || st.Notice.Raw != "") && a[AnnotationNoticeMirrored] != "true" &&
		!OwnsLabel(n, FieldManagerAgent, LabelScheduledMaintenanceTime) && !OwnsAnnotation(n, FieldManagerAgent, AnnotationUpcomingMaintenance)
	return st, noticeUnreadable
}

// ReadNotice decodes the upcoming-maintenance annotation raw: the notice
// it holds, with Raw the annotation as it stands. One that says no notice
// or cannot be read keeps only its Raw (its Status is ""): it is kept as
// it is, and acted on as no notice.
func ReadNotice(raw string) maintenance.Notice {
	n, _ := readNotice(raw)
	return n
}

// readNotice is ReadNotice, and whether raw is a notice that cannot be
// read.
func readNotice(raw string) (maintenance.Notice, bool) {
	n, present, err := maintenance.ParseNotice(raw)
	if err != nil || !present {
		return maintenance.Notice{Raw: raw}, err != nil
	}
	n.Raw = raw
	return n, false
}

// readDrainEnd reads AnnotationDrain; a value it does not know is none.
func readDrainEnd(s string) DrainEnd {
	if e := DrainEnd(s); e == DrainDone || e == DrainIncomplete {
		return e
	}
	return ""
}

func readTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func writeTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// set sets m[k] to v, or deletes k when v is empty.
func set(m map[string]string, k, v string) {
	if v == "" {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// WriteAgentState writes st onto n with its consequences: the
// active-maintenance label and the impending-termination taint. The
// maintenance keys exist only while maintenance is under way. Back to
// idle, it removes the label and the taint only if the agent's own phase
// was on n (it set them); a label or taint that another controller (GKE's
// maintenance handler) set while the agent was idle is left alone. It
// leaves spec.unschedulable alone (cordoning is the agent's decision).
func WriteAgentState(n *corev1.Node, st AgentState) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	active := st.Active()
	// The agent owns the active-maintenance label and the taint only
	// while its own phase is on the Node (or is being written now), and
	// the maintenance is not left to GKE's handler: GKE's own handler
	// writes the same keys, and the agent never strips what another
	// controller set.
	owned := active && !st.LeftToGKE || !active && n.Annotations[AnnotationPhase] != "" && n.Annotations[AnnotationLeftToGKE] != "true"
	whileActive := func(v string) string {
		if !active {
			return ""
		}
		return v
	}
	a := n.Annotations
	set(a, AnnotationPhase, whileActive(string(st.Phase)))
	set(a, AnnotationReason, whileActive(string(st.Reason)))
	set(a, AnnotationStarted, whileActive(writeTime(st.Started)))
	set(a, AnnotationDeadline, whileActive(writeTime(st.Deadline)))
	set(a, AnnotationBootID, whileActive(st.BootID))
	set(a, AnnotationCordonedBefore, whileActive(strconv.FormatBool(st.CordonedBefore)))
	set(a, AnnotationRequestID, whileActive(st.RequestID))
	set(a, AnnotationRequested, whileActive(writeTime(st.Requested)))
	set(a, AnnotationOperation, st.Call.encode())
	set(a, AnnotationLastEvent, string(st.LastEvent))
	set(a, AnnotationNoticeDone, st.NoticeDone)
	begun := ""
	if st.Begun {
		begun = "true"
	}
	set(a, AnnotationBegun, whileActive(begun))
	left := ""
	if st.LeftToGKE {
		left = "true"
	}
	set(a, AnnotationLeftToGKE, whileActive(left))
	set(a, AnnotationDrain, whileActive(string(st.Drain)))
	set(a, AnnotationRepairCall, whileActive(string(st.RepairCall)))
	set(a, AnnotationGKEStatusBefore, whileActive(st.GKEStatusBefore))
	set(a, AnnotationLastFaultRepair, st.LastRepair.encode())
	if !active { // the relayed call is over with the maintenance
		delete(a, AnnotationComputeCall)
		delete(a, AnnotationComputeAnswer)
	}
	// The notice keys: the agent's mirror, unless another controller's.
	if !st.NoticeForeign {
		set(a, AnnotationUpcomingMaintenance, st.Notice.Raw)
		set(n.Labels, LabelScheduledMaintenanceTime, st.ScheduledTime)
		mirrored := ""
		if st.Notice.Raw != "" || st.ScheduledTime != "" {
			mirrored = "true"
		}
		set(a, AnnotationNoticeMirrored, mirrored)
	}
	writeLasting(n, st)
	switch {
	case !owned:
	case st.Phase == PhaseDraining:
		n.Labels[LabelActiveMaintenance] = ValueOngoing
	case st.Phase == PhaseTerminating:
		n.Labels[LabelActiveMaintenance] = ValueTerminating
	default:
		delete(n.Labels, LabelActiveMaintenance)
	}
	if owned {
		setTaint(n, active)
	}
}

// writeLasting writes what of st outlives a maintenance: the VM's known
// end, the node's idleness and pod groups, its counts and failures.
func writeLasting(n *corev1.Node, st AgentState) {
	a := n.Annotations
	set(n.Labels, LabelKnownEnd, writeUnix(st.KnownEnd))
	set(a, AnnotationIdleSince, writeTime(st.IdleSince))
	set(a, AnnotationBusy, st.Busy)
	set(a, AnnotationPodGroups, EncodePodGroups(st.PodGroups))
	set(a, AnnotationInterruptions, st.Interruptions.encode())
	set(a, AnnotationLastBootID, st.LastBootID)
	set(a, AnnotationKubeletVersion, st.LastKubelet)
	set(a, AnnotationVoluntaryFailures, st.Failures.encode())
}
