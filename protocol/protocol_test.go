package protocol

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/test/gosrc"
)

// TestKeysHaveOneWriter: every key is in the table once, with one writer;
// the project's own keys are written by the agent or the aggregator, and a
// key another component may request is consumed by the agent or the
// aggregator.
func TestKeysHaveOneWriter(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys {
		if seen[k.Name] {
			t.Errorf("%s is in Keys twice", k.Name)
		}
		seen[k.Name] = true
		if k.Writer == "" || len(k.Readers) == 0 {
			t.Errorf("%s: writer %q, readers %v; want one writer and a reader", k.Name, k.Writer, k.Readers)
		}
		if strings.HasPrefix(k.Name, Prefix) && k.Writer != Agent && k.Writer != Aggregator && !(k.Writer == Person && k.Registration) {
			t.Errorf("%s is the project's, but written by %s (only an operator's label given at registration may be)", k.Name, k.Writer)
		}
		if len(k.Requesters) > 0 && k.Consumer != Agent && k.Consumer != Aggregator {
			t.Errorf("%s is a request, but neither the agent nor the aggregator consumes it", k.Name)
		}
	}
	// Every key the package declares is in the table.
	for name, value := range declaredKeys(t) {
		if !seen[value] {
			t.Errorf("%s (%s) is declared but not in Keys", name, value)
		}
	}
	var writes []string
	for _, k := range Keys {
		if k.Writer == Aggregator {
			writes = append(writes, k.Name)
		}
	}
	if want := []string{LabelPerformMaintenance, AnnotationMaintenanceState, AnnotationRepairs, AnnotationSliceMaintenance, TaintSliceDown,
		LabelReportFaulty, AnnotationReportFaultyDescription, TaintFaulty, AnnotationFaultRepair, AnnotationReservationGroup, AnnotationComputeAnswer, AnnotationVMFacts, LabelGang}; !cmp.Equal(writes, want) {
		t.Errorf("the aggregator writes %v, want %v", writes, want)
	}
}

// declaredKeys are the package's untyped Label*, Annotation*, Taint* and
// PodAnnotation* string constants, by name.
func declaredKeys(t *testing.T) map[string]string {
	t.Helper()
	consts, err := gosrc.StringConsts("..", "protocol")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range consts {
		for _, prefix := range []string{"Label", "Annotation", "Taint", "PodAnnotation"} {
			if strings.HasPrefix(c.Name, prefix) && !c.Typed {
				out[c.Name] = c.Value
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found %d keys: the scan is broken", len(out))
	}
	return out
}

// TestEachKeyAndInterruptionSpelledOnce: no string literal in the
// module's code outside this package's declarations spells a key, an
// interruption type, an interruption reason or an Event reason: they are
// all named here.
func TestEachKeyAndInterruptionSpelledOnce(t *testing.T) {
	type spelling struct {
		value string
		exact bool // the literal is the value (a short word), not contains it
	}
	var want []spelling
	for _, k := range Keys {
		if k.Kind == Condition && !strings.Contains(k.Name, "/") {
			continue // Kubernetes' own condition types: k8s.io/api's constants.
		}
		want = append(want, spelling{k.Name, false})
	}
	for _, typ := range InterruptionTypes() {
		want = append(want, spelling{string(typ), false})
	}
	for _, i := range Interruptions {
		want = append(want, spelling{string(i.Reason), true})
	}
	for _, r := range EventReasons {
		want = append(want, spelling{r.Reason, true})
	}
	count := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, w := range want {
				if w.exact && s == w.value || !w.exact && strings.Contains(s, w.value) {
					count[w.value] = append(count[w.value], fset.Position(lit.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		where := count[w.value]
		if len(where) != 1 || !strings.HasPrefix(where[0], filepath.Join("..", "protocol")+string(filepath.Separator)) {
			t.Errorf("%q is spelled %d times, want once in package protocol: %v", w.value, len(where), where)
		}
	}
}

func TestReasonInterruption(t *testing.T) {
	for _, tc := range []struct {
		reason Reason
		want   Interruption
		ok     bool
	}{
		{ReasonHostMaintenance, HostMaintenance, true},
		{ReasonManual, HostMaintenance, true},
		{ReasonPreemption, Preemption, true},
		{"", Interruption{}, false},
		{"reboot", Interruption{}, false},
	} {
		got, ok := tc.reason.Interruption()
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q.Interruption() = %v, %t; want %v, %t", tc.reason, got, ok, tc.want, tc.ok)
		}
	}
	for _, i := range Interruptions {
		back, ok := ParseInterruptionKey(i.Key())
		if !ok || back != i {
			t.Errorf("ParseInterruptionKey(%q) = %v, %t", i.Key(), back, ok)
		}
	}
	for _, bad := range []string{"", "MaintenanceEvent", "/HostError", "MaintenanceEvent/"} {
		if _, ok := ParseInterruptionKey(bad); ok {
			t.Errorf("ParseInterruptionKey(%q) accepted", bad)
		}
	}
}

// TestNodeInterruptionsAddsRepairs: the node's total is the agent's counts
// plus what the aggregator carried over; unreadable values count nothing.
func TestNodeInterruptionsAddsRepairs(t *testing.T) {
	n := &corev1.Node{}
	WriteAgentState(n, AgentState{Interruptions: Counts{}.Add(HostMaintenance, 1).Add(UnannouncedReboot, 1)})
	WriteRepairs(n, Repairs{RecreatedFrom: "uid-1", Interruptions: Counts{}.Add(HostMaintenance, 2).Add(Repair, 1)})
	want := Counts{HostMaintenance.Key(): 3, UnannouncedReboot.Key(): 1, Repair.Key(): 1}
	if d := cmp.Diff(want, NodeInterruptions(n)); d != "" {
		t.Errorf("NodeInterruptions (-want +got):\n%s", d)
	}
	if got := ReadRepairs(n).RecreatedFrom; got != "uid-1" {
		t.Errorf("recreated from %q", got)
	}
	n.Annotations[AnnotationInterruptions] = "{not json"
	n.Annotations[AnnotationRepairs] = "[]"
	if got := NodeInterruptions(n); len(got) != 0 {
		t.Errorf("unreadable counts read as %v", got)
	}
}

// TestTriggerWrittenReadConsumed: the aggregator's trigger reads back as
// opportunistic, and consuming it removes both keys and nothing else.
func TestTriggerWrittenReadConsumed(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"keep": "me"}}}
	if _, set, _ := ReadTrigger(n); set {
		t.Fatal("a Node without the label reads as triggered")
	}
	WriteTrigger(n, MaintenanceState{OpportunisticTriggered: true, TriggeredBy: "aggregator-0"})
	value, set, ms := ReadTrigger(n)
	if value != TriggerValue || !set || !ms.OpportunisticTriggered || ms.TriggeredBy != "aggregator-0" {
		t.Errorf("read back %q, %t, %+v", value, set, ms)
	}
	ConsumeTrigger(n)
	if len(n.Labels) != 1 || len(n.Annotations) != 0 {
		t.Errorf("after consuming: labels %v, annotations %v", n.Labels, n.Annotations)
	}
	n.Labels[LabelPerformMaintenance] = "yes"
	n.Annotations = map[string]string{AnnotationMaintenanceState: "{oops"}
	if value, set, ms := ReadTrigger(n); value != "yes" || !set || ms.OpportunisticTriggered {
		t.Errorf("a person's odd value read as %q, %t, %+v", value, set, ms)
	}
}

// TestAgentStateWritesItsConsequences: the phase sets the
// active-maintenance label and the taint; back to idle, only what outlives
// a maintenance stays, and taints of others are kept.
func TestAgentStateWritesItsConsequences(t *testing.T) {
	other := corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	n := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{other}}}
	for _, tc := range []struct {
		phase Phase
		label string
		taint bool
	}{{PhaseDraining, ValueOngoing, true}, {PhaseTerminating, ValueTerminating, true}, {PhaseIdle, "", false}} {
		WriteAgentState(n, AgentState{Phase: tc.phase, Reason: ReasonPreemption, BootID: "b", IdleSince: readTime("2026-11-23T00:00:00Z")})
		if got := n.Labels[LabelActiveMaintenance]; got != tc.label || HasTaint(n) != tc.taint || !HasTaintKey(n, other.Key) {
			t.Errorf("%s: label %q, our taint %t, taints %v", tc.phase, got, HasTaint(n), n.Spec.Taints)
		}
	}
	if _, ok := n.Annotations[AnnotationReason]; ok {
		t.Errorf("idle Node keeps the maintenance keys: %v", n.Annotations)
	}
	if n.Annotations[AnnotationIdleSince] == "" {
		t.Error("idle-since does not outlive the maintenance")
	}
}

// TestAgentLeavesGKEsKeysAlone: GKE's own handler writes the
// active-maintenance label and the taint; an idle agent (no phase of its
// own on the Node) leaves them; once its own maintenance has run, it
// removes what it set.
func TestAgentLeavesGKEsKeysAlone(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelActiveMaintenance: ValueOngoing}}}
	setTaint(n, true) // as GKE writes it
	WriteAgentState(n, AgentState{Phase: PhaseIdle, ScheduledTime: "1797732000"})
	if n.Labels[LabelActiveMaintenance] != ValueOngoing || !HasTaint(n) {
		t.Fatalf("an idle agent stripped GKE's keys: labels %v, taints %v", n.Labels, n.Spec.Taints)
	}
	WriteAgentState(n, AgentState{Phase: PhaseDraining, Reason: ReasonHostMaintenance})
	WriteAgentState(n, AgentState{Phase: PhaseIdle})
	if _, ok := n.Labels[LabelActiveMaintenance]; ok || HasTaint(n) {
		t.Errorf("back from its own maintenance, the agent left its keys: labels %v, taints %v", n.Labels, n.Spec.Taints)
	}
}

// TestAgentRemovesOnlyTheNoticeItMirrored: GKE's handler mirrors the
// notice on the same keys. An agent that mirrored none (its VM answers 404,
// or "not yet") reads none and leaves GKE's keys; one that mirrored a notice
// removes it when the notice ends.
func TestAgentRemovesOnlyTheNoticeItMirrored(t *testing.T) {
	gke := func() *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{LabelScheduledMaintenanceTime: "1797732000"},
			Annotations: map[string]string{AnnotationUpcomingMaintenance: `{"maintenance_status":"PENDING"}`}}}
	}
	n := gke()
	st := ReadAgentState(n)
	if !st.NoticeForeign || st.ScheduledTime != "1797732000" {
		t.Errorf("GKE's notice read as the agent's: %+v", st)
	}
	WriteAgentState(n, AgentState{Phase: PhaseIdle, NoticeForeign: true})
	if n.Labels[LabelScheduledMaintenanceTime] != "1797732000" || n.Annotations[AnnotationUpcomingMaintenance] == "" {
		t.Errorf("an agent with no notice removed GKE's: labels %v, annotations %v", n.Labels, n.Annotations)
	}

	n = gke()
	WriteAgentState(n, AgentState{Phase: PhaseIdle, ScheduledTime: "1797735600", Notice: ReadNotice(`{"maintenance_status":"PENDING","window_start_time":"x"}`)})
	if st := ReadAgentState(n); st.ScheduledTime != "1797735600" || st.NoticeForeign || n.Annotations[AnnotationNoticeMirrored] != "true" {
		t.Errorf("the agent's mirror reads %+v, annotations %v", st, n.Annotations)
	}
	WriteAgentState(n, AgentState{Phase: PhaseIdle})
	_, label := n.Labels[LabelScheduledMaintenanceTime]
	_, notice := n.Annotations[AnnotationUpcomingMaintenance]
	_, marker := n.Annotations[AnnotationNoticeMirrored]
	if label || notice || marker {
		t.Errorf("the agent's own mirror outlived its notice: labels %v, annotations %v", n.Labels, n.Annotations)
	}
}

// TestEventReasonsListed: every Event reason the package declares is in
// EventReasons once, with a known source, and every trigger refusal is an
// agent's Warning.
func TestEventReasonsListed(t *testing.T) {
	consts, err := gosrc.StringConsts("..", "protocol")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]EventReason{}
	for _, r := range EventReasons {
		if _, twice := listed[r.Reason]; twice {
			t.Errorf("%s is in EventReasons twice", r.Reason)
		}
		listed[r.Reason] = r
		for _, src := range r.Sources {
			if src != EventSourceAgent && src != EventSourceAggregator {
				t.Errorf("%s: unknown source %q", r.Reason, src)
			}
		}
		if len(r.Sources) == 0 {
			t.Errorf("%s has no source", r.Reason)
		}
	}
	declared := 0
	for _, c := range consts {
		if !strings.HasPrefix(c.Name, "Event") || strings.HasPrefix(c.Name, "EventSource") {
			continue
		}
		declared++
		if _, ok := listed[c.Value]; !ok {
			t.Errorf("%s (%s) is not in EventReasons", c.Name, c.Value)
		}
	}
	if declared != len(EventReasons) {
		t.Errorf("%d Event* constants declared, %d reasons listed", declared, len(EventReasons))
	}
	for _, r := range TriggerRefusals {
		// A Warning, but for an observed node's, where nothing went wrong.
		if e := listed[r]; e.Warning != (r != EventManualObserved) || len(e.Sources) != 1 || e.Sources[0] != EventSourceAgent {
			t.Errorf("trigger refusal %s: %+v, want an agent's Warning (Normal for %s)", r, e, EventManualObserved)
		}
	}
}

// TestSliceHostOfReadsAsTheState: a slice host is read as its agent's
// state is, from the four keys alone.
func TestSliceHostOfReadsAsTheState(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, st := range []AgentState{
		{Phase: PhaseIdle},
		{Phase: PhaseDraining, Reason: ReasonPreemption, Started: at, Deadline: at.Add(30 * time.Second), Interruptions: Counts{}.Add(Preemption, 1)},
		{Phase: PhaseTerminating, Reason: ReasonSlice, Started: at, Deadline: at.Add(time.Hour)},
		{Phase: PhaseDraining, Reason: ReasonSlice, Started: at, Deadline: at.Add(time.Hour), Drain: DrainIncomplete},
		{Phase: PhaseIdle, Drain: DrainDone},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		WriteAgentState(n, st)
		read := ReadAgentState(n)
		want := SliceHost{Name: "h", Phase: read.Phase, Reason: read.Reason, Started: read.Started, Deadline: read.Deadline, Drain: read.Drain, Ready: true}
		if got := SliceHostOf(n); got != want {
			t.Errorf("%s: SliceHostOf %+v, want %+v", st.Phase, got, want)
		}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h", Annotations: map[string]string{AnnotationPhase: "Bogus", AnnotationReason: "x"}}}
	if got := SliceHostOf(n); got.Phase != PhaseIdle {
		t.Errorf("an unknown phase reads %q, want Idle", got.Phase)
	}
}

// TestSliceMembershipFollowsTheChips: a node's multi-host slice is read
// from its TPU topology and its own chips: the allocatable, else the
// capacity (a kubelet restart zeroes the allocatable until the device
// plugin registers again). While neither says (a new node, its plugin not
// yet registered), a topology of more chips than any host has is a slice
// of unknown size, and a smaller one may or may not be: both say why.
func TestSliceMembershipFollowsTheChips(t *testing.T) {
	node := func(topology string, allocatable, capacity string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h", Labels: map[string]string{LabelNodePool: "pool", LabelTPUTopology: topology}}}
		if allocatable != "" {
			n.Status.Allocatable = corev1.ResourceList{ResourceTPU: resource.MustParse(allocatable)}
		}
		if capacity != "" {
			n.Status.Capacity = corev1.ResourceList{ResourceTPU: resource.MustParse(capacity)}
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		n       *corev1.Node
		slice   string
		hosts   int
		unknown bool
	}{
		{"registered: 16 chips, 4 per host", node("2x2x4", "4", "4"), "pool", 4, false},
		{"registered: one host with every chip", node("2x4", "8", "8"), "", 1, false},
		{"allocatable zeroed by a kubelet restart: the capacity says", node("2x2x2", "0", "4"), "pool", 2, false},
		{"unregistered, more chips than any host has: a slice of unknown size", node("2x2x4", "", ""), "pool", 0, true},
		{"unregistered, 8 chips: one host or two, unknown", node("2x2x2", "", ""), "", 0, true},
		{"unregistered, one chip: one host", node("1x1", "", ""), "", 0, false},
		{"no topology", node("", "", ""), "", 0, false},
	} {
		slice, hosts, unknown := SliceOf(tc.n, LabelNodePool, ""), SliceHosts(tc.n), SliceUnknown(tc.n, "")
		if slice != tc.slice || hosts != tc.hosts || (unknown != "") != tc.unknown {
			t.Errorf("%s: slice %q, hosts %d, unknown %q; want %q, %d, unknown %t", tc.name, slice, hosts, unknown, tc.slice, tc.hosts, tc.unknown)
		}
	}
	if got := SliceUnknown(node("2x2x2", "", ""), "my-slice-label"); got != "" {
		t.Errorf("with a slice label: unknown %q; the label says membership outright", got)
	}
}

// TestOwnership: who wrote a label or an annotation is read from the
// Node's managed fields, so that the agent tells its own older writes
// from GKE's handler's on the same keys.
func TestOwnership(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		entry(FieldManagerAgent, `{"f:metadata":{"f:labels":{"f:`+LabelScheduledMaintenanceTime+`":{}},"f:annotations":{"f:`+AnnotationUpcomingMaintenance+`":{}}}}`),
		entry(FieldManagerGKE, `{"f:metadata":{"f:labels":{"f:`+LabelActiveMaintenance+`":{}}}}`),
		entry("broken", `{"f:metadata":`),
	}}}
	for _, tc := range []struct {
		got, want bool
		what      string
	}{
		{OwnsLabel(n, FieldManagerAgent, LabelScheduledMaintenanceTime), true, "the agent's label"},
		{OwnsAnnotation(n, FieldManagerAgent, AnnotationUpcomingMaintenance), true, "the agent's annotation"},
		{OwnsLabel(n, FieldManagerAgent, LabelActiveMaintenance), false, "GKE's label, as the agent's"},
		{OwnsLabel(n, FieldManagerGKE, LabelActiveMaintenance), true, "GKE's label"},
		{OwnsAnnotation(n, FieldManagerGKE, AnnotationUpcomingMaintenance), false, "the agent's annotation, as GKE's"},
		{OwnsLabel(n, "broken", LabelActiveMaintenance), false, "an unreadable entry"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %t, want %t", tc.what, tc.got, tc.want)
		}
	}
	n.Labels = map[string]string{LabelScheduledMaintenanceTime: "1798081200"}
	if ReadAgentState(n).NoticeForeign {
		t.Error("a notice an older agent mirrored (its field manager, no record) read as another controller's")
	}
	n.ManagedFields = n.ManagedFields[1:]
	if !ReadAgentState(n).NoticeForeign {
		t.Error("a notice no agent wrote read as the agent's")
	}
}

// TestTimesDecodedWithTheirErrors: a trigger's time and a scheduled
// maintenance time are read with the error that names a bad value; absent
// is zero, no error.
func TestTimesDecodedWithTheirErrors(t *testing.T) {
	if at, err := (MaintenanceState{TriggeredAt: "2026-11-29T12:00:00Z"}).TriggeredTime(); err != nil || at.Unix() != 1795953600 {
		t.Errorf("TriggeredTime: %v, %v", at, err)
	}
	if at, err := (MaintenanceState{}).TriggeredTime(); err != nil || !at.IsZero() {
		t.Errorf("TriggeredTime of none: %v, %v", at, err)
	}
	if _, err := (MaintenanceState{TriggeredAt: "yesterday"}).TriggeredTime(); err == nil || !strings.Contains(err.Error(), `"yesterday"`) {
		t.Errorf("TriggeredTime of yesterday: %v", err)
	}
	if at, err := ParseScheduledTime("1797732000"); err != nil || at.Unix() != 1797732000 {
		t.Errorf("ParseScheduledTime: %v, %v", at, err)
	}
	for _, bad := range []string{"soon", "-5", "0"} {
		if _, err := ParseScheduledTime(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseScheduledTime(%q): %v", bad, err)
		}
	}
	if at, err := ParseScheduledTime(""); err != nil || !at.IsZero() {
		t.Errorf("ParseScheduledTime of none: %v, %v", at, err)
	}
}
