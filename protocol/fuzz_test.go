package protocol

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The fuzz targets' properties: every key the product reads from a Node
// or a pod, whatever its value, is read without a panic; what is read
// and written back reads the same (the state an agent restarts from is
// the state it wrote); counts are only the taxonomy's, within MaxCount.
// make test runs the seeds; make fuzz searches further.

// nodeKeys are the Node labels and annotations of the protocol, in the
// order nodeFrom fills them.
var nodeKeys = func() []Key {
	var out []Key
	for _, k := range Keys {
		if k.Kind == Label || k.Kind == Annotation {
			out = append(out, k)
		}
	}
	return out
}()

// nodeFrom makes a Node whose protocol keys hold data's fields, split on
// "\x1f" in nodeKeys' order (an empty field: the key is absent), with
// tpu TPUs allocatable.
func nodeFrom(data string, tpu int64) *corev1.Node {
	n := &corev1.Node{}
	n.Name = "fuzzed"
	n.Labels, n.Annotations = map[string]string{}, map[string]string{}
	for i, v := range strings.Split(data, "\x1f") {
		if i >= len(nodeKeys) || v == "" {
			continue
		}
		if nodeKeys[i].Kind == Label {
			n.Labels[nodeKeys[i].Name] = v
		} else {
			n.Annotations[nodeKeys[i].Name] = v
		}
	}
	n.Status.Allocatable = corev1.ResourceList{ResourceTPU: *resource.NewQuantity(tpu, resource.DecimalSI)}
	return n
}

// fields writes values as nodeFrom reads them.
func fields(values map[string]string) string {
	out := make([]string, len(nodeKeys))
	for i, k := range nodeKeys {
		out[i] = values[k.Name]
	}
	return strings.Join(out, "\x1f")
}

// sameTimes compares times as instants.
var sameTimes = cmp.Options{cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }), cmpopts.EquateEmpty()}

func FuzzNodeKeys(f *testing.F) {
	// Seeds: what the agent writes in each phase, and values it does not.
	at := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	for _, st := range []AgentState{
		{},
		{Phase: PhaseIdle, ScheduledTime: "1796151600", Notice: ReadNotice(`{"maintenance_status":"PENDING","window_start_time":"2026-12-01T19:00:00Z"}`), IdleSince: at, Busy: "pods"},
		{Phase: PhaseDraining, Reason: ReasonHostMaintenance, Started: at, Deadline: at.Add(time.Hour), BootID: "b1", CordonedBefore: true, LastEvent: "TERMINATE_ON_HOST_MAINTENANCE",
			Interruptions: Counts{HostMaintenance.Key(): 2, Preemption.Key(): 1}, Failures: Failures{Count: 2, Reason: "Failed", Last: at, RetryAfter: at.Add(time.Hour)}},
		{Phase: PhaseTerminating, Reason: ReasonManual, Started: at, Deadline: at, RequestID: "r", Requested: at, Begun: true, Drain: DrainDone, LeftToGKE: true,
			Call: Call{RequestID: "r", Method: RepairPerformMaintenance, Requested: at, Operation: "op"}},
		{Phase: PhaseIdle, Call: Call{RequestID: "r", Method: RepairReport, Requested: at, Operation: "op", Done: true}, LastRepair: LastFaultRepair{Outcome: RepairOvertaken, Ended: at, By: "preemption"}},
		{Phase: PhaseDraining, Reason: ReasonSlice, Started: at, Deadline: at, Drain: DrainIncomplete, NoticeDone: "1796151600"},
	} {
		n := &corev1.Node{}
		WriteAgentState(n, st)
		WriteSliceAsk(n, &SliceAsk{Slice: "s", Cause: "h-0", Reason: ReasonPreemption, Started: at, Deadline: at.Add(30 * time.Second)})
		WriteRepairs(n, Repairs{RecreatedFrom: "uid", Interruptions: Counts{Repair.Key(): 1}})
		WriteTrigger(n, MaintenanceState{OpportunisticTriggered: true, ScheduledTime: "1796151600"})
		n.Labels[LabelTPUTopology] = "4x4x4"
		values := map[string]string{}
		for k, v := range n.Labels {
			values[k] = v
		}
		for k, v := range n.Annotations {
			values[k] = v
		}
		f.Add(fields(values), int64(4))
	}
	f.Add(fields(map[string]string{
		AnnotationPhase: "exploding", AnnotationStarted: "yesterday", AnnotationInterruptions: `{"MaintenanceEvent/HW/SW Maintenance":-1,"a/b":3,"PreemptionEvent/Eviction":99999999999}`,
		AnnotationVoluntaryFailures: `{"count":0,"reason":"x"}`, AnnotationSliceMaintenance: `{"cause":"","deadline":"2026-12-01T19:00:00Z"}`,
		AnnotationRepairs: `{"interruptions":{"TerminationEvent/AutoRepair":1e9}}`, LabelTPUTopology: "4294967296x4294967296", AnnotationDrain: "maybe",
		AnnotationMaintenanceState: `[]`, LabelActiveMaintenance: "passthrough",
	}), int64(1))
	f.Add(fields(map[string]string{LabelTPUTopology: "3037000500x3037000500x2", AnnotationDeadline: "2026-12-01T20:00:00+01:00", AnnotationPhase: string(PhaseDraining)}), int64(-3))

	f.Fuzz(func(t *testing.T, data string, tpu int64) {
		n := nodeFrom(data, tpu)

		st := ReadAgentState(n)
		if both, unreadable := ReadAgentStateAndUnreadable(n); !cmp.Equal(both, st, sameTimes) || !slices.Equal(unreadable, Unreadable(n)) {
			t.Errorf("read with its unreadable keys, the state is %+v and they are %v; want %+v and %v", both, unreadable, st, Unreadable(n))
		}
		written := n.DeepCopy()
		WriteAgentState(written, st)
		if again := ReadAgentState(written); !cmp.Equal(st, again, sameTimes) {
			t.Errorf("the agent's state read, written and read again differs (-read +again):\n%s", cmp.Diff(st, again, sameTimes))
		}
		for _, c := range []Counts{st.Interruptions, NodeInterruptions(n), ReadRepairs(n).Interruptions} {
			for k, v := range c {
				if _, ok := ParseInterruptionKey(k); !ok || v < 0 || v > 2*MaxCount {
					t.Errorf("counts %v hold %q: %d", c, k, v)
				}
			}
		}
		_ = SliceHostOf(n)
		_ = ForgetConditions(n)
		forgotten := n.DeepCopy()
		Forget(forgotten)

		if ask, ok := ReadSliceAsk(n); ok {
			w := n.DeepCopy()
			WriteSliceAsk(w, &ask)
			if again, ok := ReadSliceAsk(w); !ok || !cmp.Equal(ask, again, sameTimes) {
				t.Errorf("the slice ask read, written and read again: %+v, then %+v (%t)", ask, again, ok)
			}
		}
		r := ReadRepairs(n)
		w := n.DeepCopy()
		WriteRepairs(w, r)
		if again := ReadRepairs(w); !cmp.Equal(r, again, sameTimes) {
			t.Errorf("the repairs read, written and read again: %+v, then %+v", r, again)
		}
		if _, set, ms := ReadTrigger(n); set {
			w := n.DeepCopy()
			WriteTrigger(w, ms)
			if _, _, again := ReadTrigger(w); !cmp.Equal(ms, again, sameTimes) {
				t.Errorf("the trigger's state read, written and read again: %+v, then %+v", ms, again)
			}
		}
		chips := TopologyChips(n.Labels[LabelTPUTopology])
		if chips < 0 || chips > MaxTopologyChips {
			t.Errorf("TopologyChips(%q) = %d", n.Labels[LabelTPUTopology], chips)
		}
		if hosts := SliceHosts(n); hosts < 0 || hosts > chips {
			t.Errorf("SliceHosts = %d of %d chips", hosts, chips)
		}
		_ = SliceOf(n, LabelNodePool, "")
	})
}

func FuzzWorkloadNotice(f *testing.F) {
	at := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	for _, n := range []WorkloadNotice{
		{Phase: NoticePending, WindowStart: at},
		{Phase: NoticeOngoing, WindowStart: at, WindowEnd: at.Add(time.Hour)},
		{Phase: NoticeStarting, EvictAt: at},
	} {
		f.Add(n.Encode())
	}
	f.Add("MAINTENANCE_PHASE=pending\nMAINTENANCE_WINDOW_START_TIME=2026-12-01T19:00:00.5+01:00\n")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseWorkloadNotice(s)
		if err != nil {
			return
		}
		// What a pod reads renders as the agent writes it, and that reads
		// back to the same text.
		text := n.Encode()
		again, err := ParseWorkloadNotice(text)
		if err != nil || again.Encode() != text {
			t.Errorf("ParseWorkloadNotice(%q) renders %q, which reads as %+v (%v)", s, text, again, err)
		}
	})
}

func FuzzCheckpointLead(f *testing.F) {
	for _, s := range []string{"5m", "90s", " 1h ", "0s", "-5m", "forever", "1e9h", strings.Repeat("9", 400)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		lead, ok, err := CheckpointLead(map[string]string{PodAnnotationCheckpointLead: v})
		if !ok {
			t.Fatalf("CheckpointLead(%q): the annotation is there", v)
		}
		if err != nil {
			if msg := err.Error(); len(msg) > 1024 || !utf8.ValidString(msg) {
				t.Errorf("CheckpointLead(%q): an error of %d bytes", v, len(msg))
			}
			return
		}
		if again, _, err := CheckpointLead(map[string]string{PodAnnotationCheckpointLead: lead.String()}); lead <= 0 || err != nil || again != lead {
			t.Errorf("CheckpointLead(%q) = %s, but %q reads as %s, %v", v, lead, lead.String(), again, err)
		}
	})
}

// TestTopologyChips: a topology's chips, and none for what is not one or
// is larger than any slice.
func TestTopologyChips(t *testing.T) {
	for topology, want := range map[string]int{
		"2x2x4": 16, "16x16": 256, "8": 8, "": 0, "2x0": 0, "2x-2": 0, "axb": 0,
		"4294967296x4294967296": 0, "3037000500x3037000500x2": 0, "256x256": MaxTopologyChips, "256x256x2": 0,
	} {
		if got := TopologyChips(topology); got != want {
			t.Errorf("TopologyChips(%q) = %d, want %d", topology, got, want)
		}
	}
}
