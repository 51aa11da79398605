package lifecycle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// model is one node as the state machine sees it: what the metadata server
// serves, what the agent process knows (lost when it restarts), the Node,
// and what a person did to it.
type model struct {
	rng  *rand.Rand
	now  time.Time
	node *corev1.Node
	boot int
	// tpu: the VM does not serve maintenance-event.
	tpu bool
	// sliceHost: the node is a host of a multi-host slice; chipsKnown: its
	// TPU chips are registered, so that its agent can tell (a host whose
	// agent starts first joins late). ask is another host's maintenance
	// the slice follows (nil for none), and siblingsWaiting whether the
	// other hosts still drain for this host's voluntary maintenance.
	sliceHost, chipsKnown bool
	ask                   *protocol.SliceAsk
	siblingsWaiting       bool

	// served is what the metadata server serves; known is what the agent
	// has been told of it since it started (its Signals).
	served Signals
	known  Signals

	// The agent process's memory: the drain the last pass ordered
	// (running), the last one that ran to its end and the pods it left.
	running       DrainOrder
	drainEnded    DrainOrder
	drainLeft     []string
	performFor    string
	performResult *PerformResult
	requestSeq    int

	// pendingCall is a performMaintenance call made and not answered yet.
	pendingCall string

	// What a person did: cordoned the node while it was idle.
	personCordoned bool

	// faults: the aggregator approves and withdraws repairs of this node
	// and GKE's report-and-replace flow may answer (gke); frng draws
	// those, so that a model without faults draws as it did before they
	// were modelled. gkeStatus is GKE's progress label.
	faults, gke bool
	frng        *rand.Rand
	// grng draws how GKE spells its error and whether it removes its
	// label then, so that frng draws as before.
	grng      *rand.Rand
	gkeStatus string
	// notice is the VM's preemption notice (a Spot VM that has one).
	notice time.Duration
	// ends: the VM may have a known end (end, zero for none), which the
	// agent learns some time after it starts (endKnown); erng draws it,
	// so that a model without ends draws as it did before they were
	// modelled.
	ends     bool
	erng     *rand.Rand
	end      time.Time
	endKnown bool
	// need is what the node's pods need to stop (KnownEndNeed), drawn
	// with each end from nrng (zero: not known): the drain starts that
	// long (and KnownEndSlack) before the end, within the lead.
	need time.Duration
	nrng *rand.Rand

	// report is the fault report Compute Engine took, while its VM has
	// not stopped for it (nil for none): its operation runs for the time
	// Google documents and the VM stops within a minute after it ends;
	// orng draws those times, so that other draws stay as they were.
	report *modelReport
	orng   *rand.Rand
	// lrng draws a report's operation that runs longer than the report
	// timeout, so that orng draws as before.
	lrng *rand.Rand
	// pendingReport: the call in flight is a fault report; calledAt is
	// when a request ID was first called (Compute Engine takes a retry of
	// it as the same request).
	pendingReport bool
	calledAt      map[string]time.Time

	// seed and history name the history, for a failure's regression line.
	seed    uint64
	history int

	// Bookkeeping for the invariants.
	maint         int                     // numbers the maintenances, from Idle to Idle
	calledFor     map[int]map[string]bool // maintenance -> request IDs called
	interruptions map[int]int             // maintenance -> interruptions counted
	log           []string
}

var (
	pendingNotice   = parsedNotice(`{"type":"SCHEDULED","maintenance_status":"PENDING","can_reschedule":true,"window_start_time":"2026-12-01T19:00:00Z"}`)
	ongoingNotice   = parsedNotice(`{"type":"SCHEDULED","maintenance_status":"ONGOING","can_reschedule":false,"window_start_time":"2026-12-01T19:00:00Z"}`)
	fixedNotice     = parsedNotice(`{"type":"SCHEDULED","maintenance_status":"PENDING","can_reschedule":false,"window_start_time":"2026-12-01T19:00:00Z"}`)
	errModelRefused = errors.New("refused")
)

func newModel(seed uint64) *model {
	m := &model{
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now: t0,
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{}, Annotations: map[string]string{}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-0", KubeletVersion: "v1.36.3"}}},
		served:        quiet(),
		calledFor:     map[int]map[string]bool{},
		calledAt:      map[string]time.Time{},
		interruptions: map[int]int{},
	}
	if m.rng.IntN(2) == 0 {
		// Most accelerator VMs have a notice pending for weeks.
		m.served.Notice, m.served.NoticePresent = pendingNotice, true
	}
	// A VM that does not serve maintenance-event (TPU): ONGOING is its
	// only sign of a host maintenance.
	m.tpu = m.rng.IntN(4) == 0
	m.served.EventNotServed = m.tpu
	m.sliceHost = m.rng.IntN(3) == 0
	m.chipsKnown = !m.sliceHost || m.rng.IntN(2) == 0
	m.frng = rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	m.faults = m.frng.IntN(2) == 0
	m.gke = m.faults && m.frng.IntN(3) == 0
	if m.frng.IntN(3) == 0 {
		m.notice = 2 * time.Minute
	}
	m.erng = rand.New(rand.NewPCG(seed^0x2545f491, seed))
	m.ends = m.erng.IntN(2) == 0
	m.nrng = rand.New(rand.NewPCG(seed^0x9e3779b9, seed))
	m.grng = rand.New(rand.NewPCG(seed^0x85ebca6b, seed))
	m.orng = rand.New(rand.NewPCG(seed^0xc2b2ae35, seed))
	m.lrng = rand.New(rand.NewPCG(seed^0x27d4eb2f, seed))
	return m
}

// modelReport is a fault report's operation: named op, for requestID, DONE
// at done (failed: with an error) and the VM stopping at stop.
type modelReport struct {
	op, requestID string
	done, stop    time.Time
	failed        bool
	// long: the operation runs longer than the report timeout, beyond
	// what Google documents.
	long bool
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// running: the report's operation has not ended by now.
func (r *modelReport) running(now time.Time) bool { return r != nil && now.Before(r.done) }

// took plays Compute Engine taking a report, from when it was first asked
// for: as "Report faulty host" says, the VM stays RUNNING through its
// operation, "usually 10-12 minutes" (here 10 to 16, and one in six runs
// longer than the report timeout, beyond what Google documents), and the
// host's repair, which stops the VM, starts within a minute after.
func (m *model) took(op, requestID string) {
	d := []time.Duration{10 * time.Minute, 11 * time.Minute, 12 * time.Minute, 16 * time.Minute}[m.orng.IntN(4)]
	long := m.lrng.IntN(6) == 0
	if long {
		// Beyond what Google documents: longer than the report timeout,
		// within the call's bound.
		d = cfg.ReportTimeout + 15*time.Minute
	}
	at := m.calledAt[requestID]
	m.report = &modelReport{op: op, requestID: requestID, done: at.Add(d), stop: at.Add(d + time.Duration(m.orng.IntN(60))*time.Second), long: long}
	m.logf("compute: report %s taken, its operation runs %s", op, d)
}

// reportStop: the VM stops for the report it took, when its time has
// come (time moving on to it where it would pass it).
func (m *model) reportStop(until time.Time) bool {
	r := m.report
	if r == nil || r.failed || until.Before(r.stop) {
		return false
	}
	m.now = later(m.now, r.stop)
	m.reboot("the VM stops for the host's repair, after the report's operation")
	return true
}

// endEvent: the VM's end is set (a time limit: from now to beyond the
// lead), or gone; or the agent learns it.
func (m *model) endEvent() {
	switch r := m.erng.IntN(5); {
	case r < 2:
		m.end = m.now.Add(time.Duration(m.erng.IntN(3*3600)) * time.Second).Truncate(time.Second)
		m.need = []time.Duration{0, 33 * time.Second, 10 * time.Minute, 2 * time.Hour}[m.nrng.IntN(4)]
		m.logf("the VM's end is %s (its pods need %s)", m.end.Format(time.TimeOnly), m.need)
	case r < 3:
		m.end = time.Time{}
		m.logf("the VM has no end")
	default:
		m.endKnown = true
		m.logf("the agent learns the VM's end (%s)", m.end.Format(time.TimeOnly))
	}
}

// faultEvent: the aggregator approves the node's repair or withdraws the
// approval, or GKE's flow moves on.
func (m *model) faultEvent() {
	switch r := m.frng.IntN(6); {
	case r < 3:
		with := []string{protocol.RepairWithAuto, protocol.RepairWithCompute, protocol.RepairWithGKE}[m.frng.IntN(3)]
		protocol.WriteRepairApproval(m.node, protocol.RepairApproval{Behavior: protocol.BehaviorUnrecoverableGPUError, Source: protocol.FaultSourceCondition,
			Approved: m.now, DrainTimeout: protocol.Duration(30 * time.Minute), With: with})
		m.logf("aggregator: repair approved (with %q)", with)
	case r < 4:
		protocol.ConsumeRepairApproval(m.node)
		m.logf("aggregator: approval removed")
	default:
		if _, asked := m.node.Labels[protocol.LabelFaultBehavior]; asked || m.frng.IntN(4) == 0 {
			m.gkeStatus = []string{protocol.GKEStatusPodsEvicted, protocol.GKEStatusOperationRunning, protocol.GKEStatusError, ""}[m.frng.IntN(4)]
			if m.gkeStatus == protocol.GKEStatusError && m.grng.IntN(2) == 0 {
				// GKE's page writes it ERROR too, and removes its label on
				// an error.
				m.gkeStatus = "ERROR"
				delete(m.node.Labels, protocol.LabelFaultBehavior)
			}
			m.logf("gke: report-and-replace status %q (its label on: %t)", m.gkeStatus, m.node.Labels[protocol.LabelFaultBehavior] != "")
		}
	}
}

// sliceEvent: the slice changes: the device plugin registers this host's
// chips, another host's maintenance begins (forced, or a person's), turns
// forced, or ends, or the other hosts finish draining.
func (m *model) sliceEvent() {
	if !m.sliceHost {
		return
	}
	switch r := m.rng.IntN(6); {
	case r == 0:
		m.chipsKnown = true
		m.logf("slice: the chips are registered")
	case r == 1 && m.ask == nil:
		reason := []protocol.Reason{protocol.ReasonPreemption, protocol.ReasonHostMaintenance, protocol.ReasonManual}[m.rng.IntN(3)]
		deadline := m.now.Add(time.Hour)
		if reason == protocol.ReasonPreemption {
			deadline = m.now.Add(30 * time.Second)
		}
		m.ask = &protocol.SliceAsk{Slice: "v5p", Cause: "host-b", Reason: reason, Started: m.now, Deadline: deadline}
		m.logf("slice: host-b begins %s", reason)
	case r == 2 && m.ask != nil && m.ask.Reason == protocol.ReasonManual:
		m.ask = &protocol.SliceAsk{Slice: "v5p", Cause: "host-c", Reason: protocol.ReasonPreemption, Started: m.now, Deadline: m.now.Add(30 * time.Second)}
		m.logf("slice: host-c preempted: the slice turns forced")
	case r == 3:
		m.ask = nil
		m.logf("slice: no other host in maintenance")
	default:
		m.siblingsWaiting = !m.siblingsWaiting
		m.logf("slice: other hosts still draining %t", m.siblingsWaiting)
	}
}

// terminate serves TERMINATE_ON_HOST_MAINTENANCE where the VM serves the
// key at all.
func (m *model) terminate(s *Signals) {
	if !m.tpu {
		s.Event = maintenance.EventTerminate
	}
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// restartAgent: the process dies; a new one knows nothing of the server
// until it answers, and nothing of its predecessor but the Node.
func (m *model) restartAgent() {
	m.known = Signals{}
	m.running, m.drainEnded, m.drainLeft = DrainOrder{}, DrainOrder{}, nil
	m.performFor, m.performResult, m.pendingCall = "", nil, ""
	m.endKnown = false
}

// event applies one random happening.
func (m *model) event() {
	// A moment passes between two happenings: the agent keys a drain by
	// its start time, which a real clock never repeats.
	m.now = m.now.Add(time.Second)
	if m.reportStop(m.now) {
		return
	}
	if m.faults && m.frng.IntN(8) == 0 {
		m.faultEvent()
		return
	}
	if m.ends && m.erng.IntN(8) == 0 {
		m.endEvent()
		return
	}
	switch r := m.rng.IntN(100); {
	case r < 30: // the metadata server's answers change
		m.changeServed()
	case r < 45: // the agent hears one key's answer (or an unknown value: nothing)
		m.hear()
	case r < 55: // a person sets or removes the trigger
		switch r := m.rng.IntN(8); {
		case r < 5:
			m.node.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue
			m.logf("person: trigger true")
		case r < 6:
			m.node.Labels[protocol.LabelPerformMaintenance] = "yes"
			m.logf("person: trigger yes")
		default:
			delete(m.node.Labels, protocol.LabelPerformMaintenance)
			m.logf("person: trigger removed")
		}
	case r < 60: // a person cordons or uncordons an idle node
		if protocol.ReadAgentState(m.node).Phase == protocol.PhaseIdle {
			m.personCordoned = !m.personCordoned
			m.node.Spec.Unschedulable = m.personCordoned
			m.logf("person: cordoned=%t", m.personCordoned)
		}
	case r < 68: // the drain finishes: pods stuck terminating, or held by a budget, may be left
		if !m.running.IsZero() {
			m.drainEnded, m.drainLeft = m.running, nil
			if m.rng.IntN(3) == 0 {
				m.drainLeft = []string{"ml/trainer-0"}
			}
			m.logf("drain done (voluntary %t), left %v", m.running.Voluntary, m.drainLeft)
		}
	case r < 78: // Compute Engine answers a call
		m.answerCall()
	case r < 84 && m.report.running(m.now):
		m.logf("the VM stays RUNNING through the report's operation")
	case r < 84: // the VM stops and comes back, and the agent with it
		m.reboot("reboot")
	case r < 88:
		m.restartAgent()
		m.logf("agent restart")
	case r < 93:
		m.sliceEvent()
	default:
		to := m.now.Add(time.Duration(m.rng.IntN(20*60)) * time.Second)
		if !m.reportStop(to) {
			m.now = to
			m.logf("time passes")
		}
	}
}

// reboot: the VM stops and comes back, and the agent with it.
func (m *model) reboot(what string) {
	m.boot++
	m.node.Status.NodeInfo.BootID = fmt.Sprintf("boot-%d", m.boot)
	m.served = quiet()
	m.served.EventNotServed = m.tpu
	m.end = time.Time{} // a VM's end is set anew when it starts running
	m.report = nil
	if m.rng.IntN(3) == 0 {
		m.terminate(&m.served) // a new maintenance at once
	}
	m.restartAgent()
	if m.rng.IntN(2) == 0 {
		// The new agent hears the server before its first pass.
		m.known = m.served
		m.logf("%s; the new agent hears event %s first", what, m.served.Event)
	} else {
		m.logf("%s", what)
	}
}

func (m *model) changeServed() {
	s := m.served
	switch m.rng.IntN(4) {
	case 0:
		if !m.tpu {
			s.Event = []maintenance.Event{maintenance.EventNone, maintenance.EventTerminate, maintenance.EventMigrate}[m.rng.IntN(3)]
		}
	case 1:
		s.Preempted = m.rng.IntN(4) == 0
	default:
		s.NoticeNotYet = false
		switch m.rng.IntN(6) {
		case 0:
			s.Notice, s.NoticePresent = maintenance.Notice{}, false
		case 1:
			s.Notice, s.NoticePresent, s.NoticeNotYet = maintenance.Notice{}, false, true
		case 2, 3:
			s.Notice, s.NoticePresent = pendingNotice, true
		case 4:
			s.Notice, s.NoticePresent = fixedNotice, true
		default:
			s.Notice, s.NoticePresent = ongoingNotice, true
		}
	}
	m.served = s
	m.logf("served: event %s preempted %t notice %v/%s notyet %t", s.Event, s.Preempted, s.NoticePresent, s.Notice.Status, s.NoticeNotYet)
}

// hear delivers one key's served value to the agent, or an unknown value,
// or an error: those change nothing it knows.
func (m *model) hear() {
	switch m.rng.IntN(8) {
	case 0:
		m.logf("hear: unknown value or error")
		return
	case 1, 2:
		m.known = m.served
		m.known.EventKnown, m.known.PreemptedKnown, m.known.NoticeKnown = true, true, true
		m.logf("hear: every key")
		return
	}
	switch m.rng.IntN(3) {
	case 0:
		m.known.Event, m.known.EventKnown, m.known.EventNotServed = m.served.Event, true, m.served.EventNotServed
	case 1:
		m.known.Preempted, m.known.PreemptedKnown = m.served.Preempted, true
	default:
		m.known.Notice, m.known.NoticePresent, m.known.NoticeNotYet, m.known.NoticeKnown = m.served.Notice, m.served.NoticePresent, m.served.NoticeNotYet, true
	}
	k := m.known
	m.logf("hear: known event %s/%t preempted %t/%t notice %t/%s/%t notyet %t", k.Event, k.EventKnown, k.Preempted, k.PreemptedKnown, k.NoticePresent, k.Notice.Status, k.NoticeKnown, k.NoticeNotYet)
}

// answerCall ends the call in flight in one of the ways Compute Engine
// may: accepted, refused, permission denied, no answer in time, refused
// after it began the maintenance itself; an accepted one's operation may
// later fail.
func (m *model) answerCall() {
	if m.pendingCall == "" {
		if r := m.performResult; r != nil && r.Err == nil && r.OperationErr == nil && m.rng.IntN(3) == 0 {
			failed := *r
			failed.OperationErr, failed.OperationDone, failed.OperationEnded = errors.New("operation failed"), true, m.now
			m.performResult = &failed
			if rep := m.report; rep != nil && rep.op == r.Operation {
				rep.failed, rep.done = true, m.now
			}
			m.logf("compute: operation of %s failed", r.RequestID)
		}
		return
	}
	id := m.pendingCall
	m.pendingCall = ""
	res := &PerformResult{RequestID: id}
	switch m.rng.IntN(5) {
	case 0:
		res.Operation = "operation-" + id
		if m.pendingReport {
			m.took(res.Operation, id)
		}
		m.served.Notice, m.served.NoticePresent = fixedNotice, true
		if m.rng.IntN(2) == 0 {
			m.terminate(&m.served)
			m.served.Notice = ongoingNotice
		}
	case 1:
		res.Err, res.Outcome = errModelRefused, protocol.ManualRefused
	case 2:
		res.Err, res.Outcome = errModelRefused, protocol.ManualPermissionDenied
	case 3:
		res.Err, res.Outcome = errModelRefused, protocol.ManualFailed
	default: // refused because Compute Engine had begun on its own
		m.terminate(&m.served)
		m.served.Notice, m.served.NoticePresent = ongoingNotice, true
		res.Err, res.Outcome = errModelRefused, protocol.ManualRefused
	}
	if m.rng.IntN(2) == 0 {
		// The metadata watch tells the agent before the call returns.
		m.known = m.served
		m.known.EventKnown, m.known.PreemptedKnown, m.known.NoticeKnown = true, true, true
	}
	if m.reportStop(m.now) {
		return // the report's time has come and gone: the VM stopped, the answer lost
	}
	m.performResult = res
	m.logf("compute: call %s answered %v", id, res.Err)
}

// observation is what the agent's loop would pass to Step now.
func (m *model) observation(st State) Observation {
	m.requestSeq++
	obs := Observation{
		Now:     m.now,
		Signals: m.known,
		MachineView: MachineView{BootID: m.node.Status.NodeInfo.BootID, KubeletVersion: m.node.Status.NodeInfo.KubeletVersion, Unschedulable: m.node.Spec.Unschedulable,
			GKEReportsFaults: m.gke, GKERepairStatus: m.gkeStatus, PreemptionNotice: m.notice, GKEFaultBehavior: m.node.Labels[protocol.LabelFaultBehavior] != ""},
		PodsView:    PodsView{PodsKnown: true, Idle: true},
		TriggerView: TriggerView{RequestID: fmt.Sprintf("req-%d", m.requestSeq)},
	}
	obs.Trigger, obs.TriggerSet, _ = protocol.ReadTrigger(m.node)
	obs.Repair, obs.RepairSet = protocol.ReadRepairApproval(m.node)
	obs.DrainEnded, obs.DrainLeft = m.drainEnded, m.drainLeft
	if m.endKnown {
		obs.KnownEndView = KnownEndView{KnownEnd: m.end, KnownEndKnown: true, KnownEndCause: "maxRunDuration", KnownEndNeed: m.need}
	}
	if m.sliceHost && !m.chipsKnown {
		obs.SliceUnknown = "its TPU topology 2x2x2 may span several hosts"
	}
	if m.sliceHost && m.chipsKnown {
		obs.Slice = "v5p"
		if m.ask != nil {
			obs.SliceAsk, obs.SliceAskSet = *m.ask, true
		}
		// This host is the slice's caller while its own manual maintenance
		// is under way and no other host's is.
		if st.Active() && st.Reason == protocol.ReasonManual {
			obs.SliceVoluntary = true
			obs.SliceCaller = m.ask == nil || m.ask.Reason != protocol.ReasonManual
		}
		if m.siblingsWaiting {
			obs.SliceWaiting = []string{"host-b"}
		}
	}
	if r := m.performResult; r != nil && (r.RequestID == st.RequestID || r.RequestID == st.Call.RequestID) {
		obs.Perform = r
	}
	if r := m.report; r != nil && st.Call.Operation == r.op && !r.failed && !m.now.Before(r.done) {
		// The agent follows the operation of the node's call: DONE.
		res := PerformResult{RequestID: st.Call.RequestID, Operation: r.op}
		if obs.Perform != nil && obs.Perform.RequestID == res.RequestID {
			res = *obs.Perform
		}
		res.OperationDone, res.OperationEnded = true, r.done
		obs.Perform = &res
	}
	return obs
}

// reconcile is what the agent's loop does after a change: a pass (Step
// from the Node, write the Node, carry out the decision), and again while
// its own write changes the Node (its Node watch wakes it), checking the
// invariants after each pass. The passes must come to rest.
func (m *model) reconcile(t *testing.T) {
	t.Helper()
	before := protocol.ReadAgentState(m.node)
	for range 4 {
		obs := m.observation(before)
		dec := Step(cfg, before, obs)
		changed := dec.Apply(m.node)
		m.running = dec.Drain
		after := protocol.ReadAgentState(m.node)
		// A pass that sees the VM's reboot ends the maintenance under way,
		// and what it counts is that maintenance's, though the same pass
		// may begin another (a slice's, say).
		rebooted := before.Phase != protocol.PhaseIdle && before.LastBootID != "" && after.LastBootID != before.LastBootID
		if dec.Interruption != nil && rebooted {
			m.interruptions[m.maint]++
		}
		if after.Phase != protocol.PhaseIdle && !after.Started.Equal(before.Started) {
			m.maint++ // a new maintenance began in this pass
		}
		if dec.Perform && m.performFor != after.RequestID {
			if after.RepairCall == protocol.RepairReport && m.report.running(m.now) {
				m.fail(t, "a second report %s while the operation %s of the report %s runs", after.RequestID, m.report.op, m.report.requestID)
			}
			m.performFor = after.RequestID
			m.pendingCall = after.RequestID
			m.pendingReport = after.RepairCall == protocol.RepairReport
			if _, ok := m.calledAt[after.RequestID]; !ok {
				m.calledAt[after.RequestID] = m.now
			}
			called := m.calledFor[m.maint]
			if called == nil {
				called = map[string]bool{}
				m.calledFor[m.maint] = called
			}
			called[after.RequestID] = true
			m.logf("call performMaintenance %s", after.RequestID)
		}
		if dec.Interruption != nil && !rebooted {
			m.interruptions[m.maint]++
		}
		m.check(t, before, after, obs, dec)
		if !changed {
			return
		}
		before = after // nothing but the pass changes the Node between passes
	}
	m.fail(t, "the Node kept changing: the state machine does not come to rest")
}

func (m *model) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	t.Fatalf("%s\nhistory %d of seed %d:\n  %s\nas a line of regressionSeeds (replay: go test ./lifecycle -run 'TestStateMachineModelRegressions$'):\n\t{%d, %d, %d, %q},",
		what, m.history, m.seed, joinLines(m.log), m.seed, m.history, m.history+1, what)
}

func joinLines(lines []string) string {
	if len(lines) > 60 {
		lines = append([]string{fmt.Sprintf("... %d earlier steps", len(lines)-60)}, lines[len(lines)-60:]...)
	}
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// check asserts the invariants after a pass: st is the state it left on
// the Node.
func (m *model) check(t *testing.T, before, st State, obs Observation, dec Decision) {
	t.Helper()
	k := m.known
	forced := obs.SliceAskSet && obs.SliceAsk.Reason != protocol.ReasonManual
	// A fault's repair waits for the slice until its deadline, no longer.
	faultDue := st.Reason == protocol.ReasonFault && !m.now.Before(st.Deadline)
	switch {
	case dec.Perform && obs.SliceUnknown != "" && !faultDue:
		m.fail(t, "asked Compute Engine while the node's slice cannot be told: %s", obs.SliceUnknown)
	case dec.Perform && st.Requested.Equal(m.now) && len(obs.SliceWaiting) > 0 && !faultDue:
		m.fail(t, "asked Compute Engine while %v still drain for the slice", obs.SliceWaiting)
	case forced && before.Requested.IsZero() && st.Reason != protocol.ReasonFault && (dec.Perform || !dec.Drain.IsZero() && dec.Drain.Voluntary):
		// (A fault's repair is still asked for: the host comes back faulty
		// otherwise.)
		m.fail(t, "the slice stops by force (%s), and this host asks Compute Engine (%t) or drains voluntarily (%+v)", obs.SliceAsk.Reason, dec.Perform, dec.Drain)
	case forced && before.Requested.IsZero() && dec.State.Failures.Count > before.Failures.Count:
		m.fail(t, "a failure recorded (%s) while the slice stops by force", dec.Manual)
	}
	if st.Phase == protocol.PhaseIdle && (k.EventKnown && k.Event == maintenance.EventTerminate || k.PreemptedKnown && k.Preempted) {
		m.fail(t, "idle while TERMINATE_ON_HOST_MAINTENANCE or preemption is served: %+v (was %s %s requested %s call %s; events %v; repair %q)", k, before.Phase, before.Reason, before.Requested, before.RepairCall, dec.Events, dec.Repair)
	}
	if before.Phase == protocol.PhaseIdle && st.Phase != protocol.PhaseIdle {
		started := k.EventKnown && k.Event == maintenance.EventTerminate || k.PreemptedKnown && k.Preempted ||
			k.NoticeKnown && k.NoticePresent && k.Notice.Status == maintenance.StatusOngoing && k.EventNotServed || dec.Manual == protocol.ManualStarted ||
			obs.SliceAskSet || dec.Repair == protocol.RepairStarted && obs.RepairSet ||
			obs.KnownEndKnown && !obs.KnownEnd.IsZero() && !m.now.Before(obs.KnownEnd.Add(-knownEndLead(cfg, obs)))
		if !started {
			m.fail(t, "drained on nothing the agent understood: %+v", k)
		}
	}
	if _, asked := m.node.Labels[protocol.LabelFaultBehavior]; asked && (st.Reason != protocol.ReasonFault || st.RepairCall != protocol.RepairGKE) &&
		before.Reason == protocol.ReasonFault && before.RepairCall == protocol.RepairGKE && st.Phase == protocol.PhaseIdle && dec.Repair != protocol.RepairDone {
		m.fail(t, "GKE's fault-behavior label left behind by a repair that failed (%s)", dec.Repair)
	}
	if r := m.report; r != nil && !r.failed && !r.long && dec.Repair == protocol.RepairFailed && before.RepairCall == protocol.RepairReport && before.Call.Operation == r.op {
		m.fail(t, "gave up a report Compute Engine carries out in its documented time (operation %s DONE at %s, the VM stopping at %s): %v",
			r.op, r.done.Format(time.TimeOnly), r.stop.Format(time.TimeOnly), dec.Events)
	}
	if dec.Repair == protocol.RepairDone && (before.Reason != protocol.ReasonFault || before.Requested.IsZero()) && (before.Call.Method != protocol.RepairReport || before.Call.Operation == "") {
		m.fail(t, "a repair recorded done that was never asked for: the VM stopped for %s (requested %s)", before.Reason, before.Requested)
	}
	if dec.Perform && st.RepairCall == protocol.RepairGKE {
		m.fail(t, "a Compute Engine call asked for a repair GKE's flow makes")
	}
	if len(m.calledFor[m.maint]) > 1 {
		m.fail(t, "more than one performMaintenance request for one maintenance: %v", m.calledFor[m.maint])
	}
	if m.interruptions[m.maint] > 1 {
		m.fail(t, "one maintenance counted %d times (%s %s; events %v)", m.interruptions[m.maint], st.Phase, st.Reason, dec.Events)
	}
	if e := obs.KnownEnd; obs.KnownEndKnown && !e.IsZero() && !m.now.Before(e.Add(-knownEndLead(cfg, obs))) && st.Phase == protocol.PhaseIdle {
		m.fail(t, "idle within the lead of the VM's known end %s (its pods need %s)", e, obs.KnownEndNeed)
	}
	if e := obs.KnownEnd; obs.KnownEndKnown && !e.IsZero() && st.Active() && e.After(m.now) && st.Deadline.After(e) {
		m.fail(t, "%s drains by %s, after the VM's known end %s", st.Reason, st.Deadline, e)
	}
	if m.personCordoned && !m.node.Spec.Unschedulable {
		m.fail(t, "a person's cordon was removed")
	}
	if st.Phase == protocol.PhaseIdle && !m.personCordoned && m.node.Spec.Unschedulable {
		m.fail(t, "idle, and the agent's own cordon is left behind")
	}
	for _, e := range dec.Events {
		if e.Reason == protocol.EventEvictionComplete && len(m.drainLeft) > 0 {
			m.fail(t, "%q while the drain left %v on the node", e.Message, m.drainLeft)
		}
	}
	if (st.Phase == protocol.PhaseIdle) == protocol.HasTaint(m.node) {
		m.fail(t, "phase %s with taint %t", st.Phase, protocol.HasTaint(m.node))
	}
}

// settle brings the node back: the VM reboots, the server is quiet and
// answers every key, the drain ends, time passes. From any state this
// must end Idle, in service unless a person cordoned it.
func (m *model) settle(t *testing.T) {
	t.Helper()
	m.boot++
	m.node.Status.NodeInfo.BootID = fmt.Sprintf("boot-%d", m.boot)
	m.served = quiet()
	m.restartAgent()
	m.known = quiet()
	delete(m.node.Labels, protocol.LabelPerformMaintenance)
	protocol.ConsumeRepairApproval(m.node)
	m.gkeStatus = ""
	m.ask, m.siblingsWaiting, m.chipsKnown = nil, false, true
	m.end = time.Time{}
	m.logf("settle: reboot, quiet, trigger removed, the slice whole and its chips registered")
	for range 4 {
		m.reconcile(t)
		if !m.running.IsZero() {
			m.drainEnded, m.drainLeft = m.running, nil
		}
		m.now = m.now.Add(time.Hour)
	}
	if st := protocol.ReadAgentState(m.node); st.Phase != protocol.PhaseIdle || m.node.Spec.Unschedulable != m.personCordoned {
		m.fail(t, "stuck: after a reboot and quiet signals the node is %s, cordoned %t (a person's cordon: %t)", st.Phase, m.node.Spec.Unschedulable, m.personCordoned)
	}
}
