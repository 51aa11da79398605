package protocol

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReadCall: the node's call is read whatever the phase, from its
// record, or as an agent before the record wrote it: the operation's name
// alone while a maintenance was under way, or a report's operation the
// last repair gave up following.
func TestReadCall(t *testing.T) {
	at := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	active := map[string]string{AnnotationPhase: string(PhaseTerminating), AnnotationReason: string(ReasonFault), AnnotationRequestID: "req-1",
		AnnotationRequested: at.Format(time.RFC3339), AnnotationRepairCall: string(RepairReport)}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        Call
	}{
		{"none", nil, Call{}},
		{"recorded, idle", map[string]string{AnnotationOperation: `{"request":"req-1","method":"reportHostAsFaulty","requested":"2026-12-01T19:00:00Z","operation":"op-1"}`},
			Call{RequestID: "req-1", Method: RepairReport, Requested: at, Operation: "op-1"}},
		{"an unknown method", map[string]string{AnnotationOperation: `{"request":"req-1","method":"deleteInstance","requested":"2026-12-01T19:00:00Z"}`},
			Call{RequestID: "req-1", Requested: at}},
		{"unreadable", map[string]string{AnnotationOperation: `{"request":`}, Call{}},
		{"an earlier agent's name, under way", with(active, AnnotationOperation, "op-1"),
			Call{RequestID: "req-1", Method: RepairReport, Requested: at, Operation: "op-1"}},
		{"an earlier agent's name, idle", map[string]string{AnnotationOperation: "op-1"}, Call{}},
		{"an earlier agent's last repair", map[string]string{AnnotationLastFaultRepair: `{"outcome":"failed","ended":"2026-12-01T19:00:00Z","operation":"op-1"}`},
			Call{Method: RepairReport, Requested: at, Operation: "op-1"}},
	} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
		st := ReadAgentState(n)
		if diff := cmp.Diff(tc.want, st.Call, sameTimes); diff != "" {
			t.Errorf("%s: the call (-want +got):\n%s", tc.name, diff)
		}
		if st.LastRepair.Operation != "" {
			t.Errorf("%s: the last repair keeps the operation %q; want it held by the call alone", tc.name, st.LastRepair.Operation)
		}
		WriteAgentState(n, st)
		if again := ReadAgentState(n).Call; !cmp.Equal(st.Call, again, sameTimes) {
			t.Errorf("%s: written and read again: %+v; want %+v", tc.name, again, st.Call)
		}
	}
}

// with is m and k=v.
func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for mk, mv := range m {
		out[mk] = mv
	}
	return out
}
