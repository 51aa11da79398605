package drain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestPlanRound: one round of a group's drain, from now, the deadline, the
// pods and what the drain remembers of them: which calls are due, with
// which grace, and when to plan again.
func TestPlanRound(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	deadline := now.Add(60 * time.Second)
	pod := func(name string, grace int64) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}}
	}
	stopping := pod("stopping", 30)
	stopping.DeletionTimestamp = &metav1.Time{Time: now}
	// Pods with a checkpoint lead: told when the drain began (now), asked
	// to stop after their lead, or in time for their whole grace.
	leading := func(name, lead string, grace int64) *corev1.Pod {
		p := pod(name, grace)
		p.Annotations = map[string]string{protocol.PodAnnotationCheckpointLead: lead}
		return p
	}
	type call struct {
		Pod      string
		Grace    time.Duration
		Escalate bool
	}
	for _, tc := range []struct {
		name      string
		now       time.Time
		voluntary bool
		pods      []*corev1.Pod
		states    map[types.UID]*podState
		want      []call
		wantWake  time.Time
	}{
		{
			name: "first round: every pod, the longest grace first, each capped to the deadline",
			now:  now, pods: []*corev1.Pod{pod("short", 5), pod("long", 600), pod("mid", 30)},
			want:     []call{{"long", 60 * time.Second, false}, {"mid", 30 * time.Second, false}, {"short", 5 * time.Second, false}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "a pod stopping, evicted or with a call in flight is waited for, not asked again",
			now:  now, pods: []*corev1.Pod{stopping, pod("evicted", 30), pod("calling", 30)},
			states:   map[types.UID]*podState{"evicted": {evicted: true}, "calling": {inFlight: true}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "refused: retried at its next try; wake then, or at its escalation if sooner",
			now:  now, pods: []*corev1.Pod{pod("refused", 30), pod("refused-late", 58)},
			states: map[types.UID]*podState{
				"refused":      {blocked: true, nextTry: now.Add(5 * time.Second)},
				"refused-late": {blocked: true, nextTry: now.Add(5 * time.Second)}, // escalates at deadline - 58 s - EscalationLead
			},
			wantWake: now.Add(time.Second),
		},
		{
			name: "refused until deadline - grace: deleted, with its whole grace",
			now:  deadline.Add(-30 * time.Second), pods: []*corev1.Pod{pod("refused", 30)},
			states:   map[types.UID]*podState{"refused": {blocked: true, nextTry: deadline}},
			want:     []call{{"refused", 30 * time.Second, true}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "refused, deleted a moment after its escalation: still its whole grace, ending before the deadline",
			now:  deadline.Add(-30*time.Second - EscalationLead + 300*time.Millisecond), pods: []*corev1.Pod{pod("refused", 30)},
			states:   map[types.UID]*podState{"refused": {blocked: true, nextTry: deadline}},
			want:     []call{{"refused", 30 * time.Second, true}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "voluntary: refused until deadline - grace, still only evicted; no wake for an escalation",
			now:  deadline.Add(-30 * time.Second), voluntary: true, pods: []*corev1.Pod{pod("refused", 30), pod("later", 58)},
			states: map[types.UID]*podState{
				"refused": {blocked: true, nextTry: deadline.Add(-30 * time.Second)},
				"later":   {blocked: true, nextTry: deadline.Add(-20 * time.Second)},
			},
			want:     []call{{"refused", 30 * time.Second, false}},
			wantWake: deadline.Add(-20 * time.Second),
		},
		{
			name: "a pod whose next try is later, never refused: waited for, not escalated",
			now:  now.Add(50 * time.Second), pods: []*corev1.Pod{pod("failed", 30)},
			states:   map[types.UID]*podState{"failed": {nextTry: now.Add(51 * time.Second)}},
			wantWake: now.Add(51 * time.Second),
		},
		{
			name: "checkpoint leads: waited for; a bad one is none; a lead past deadline - grace is cut to it",
			now:  now, pods: []*corev1.Pod{leading("ckpt", "20s", 10), leading("bad", "soon", 10), leading("long", "5m", 30)},
			want:     []call{{"bad", 10 * time.Second, false}},
			wantWake: now.Add(20 * time.Second),
		},
		{
			name: "a checkpoint lead over: asked to stop, with its grace",
			now:  now.Add(20 * time.Second), pods: []*corev1.Pod{leading("ckpt", "20s", 10)},
			want:     []call{{"ckpt", 10 * time.Second, false}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "a long lead ends at deadline - grace: asked then, with the whole grace",
			now:  deadline.Add(-30 * time.Second), pods: []*corev1.Pod{leading("long", "5m", 30)},
			want:     []call{{"long", 30 * time.Second, false}},
			wantWake: deadline.Add(EndSlack),
		},
		{
			name: "past the group's end: calls still go out with the floor grace; wake only for returning calls",
			now:  deadline.Add(EndSlack), pods: []*corev1.Pod{pod("late", 30)},
			want:     []call{{"late", GraceFloor, false}},
			wantWake: deadline.Add(EndSlack).Add(time.Hour),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := tc.states
			if states == nil {
				states = map[types.UID]*podState{}
			}
			due, wake := planRound(tc.now, now, deadline, !tc.voluntary, false, tc.pods, states)
			var got []call
			for _, a := range due {
				got = append(got, call{a.pod.Name, a.grace, a.escalate})
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if !wake.Equal(tc.wantWake) {
				t.Errorf("wake at %s, want %s", wake.Sub(now), tc.wantWake.Sub(now))
			}
			for _, p := range tc.pods {
				if states[p.UID] == nil && p.DeletionTimestamp == nil {
					t.Errorf("%s has no state after the round", p.Name)
				}
			}
		})
	}
}

// TestPlanEndsEveryGraceBeforeTheStop: under a 30 s preemption, every pod
// the plan stops (workloads, one with a checkpoint lead, system and
// DaemonSet pods) has its whole grace end at least a second before the VM
// stops: the margin covers SIGTERM's delivery after the call, and a grace
// rounded up to whole seconds.
func TestPlanEndsEveryGraceBeforeTheStop(t *testing.T) {
	start := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	deadline := start.Add(30 * time.Second)
	lead := pod("ml", "trainer", 10, "")
	lead.Annotations = map[string]string{protocol.PodAnnotationCheckpointLead: "5m"}
	pods := []*corev1.Pod{lead, pod("ml", "server", 60, ""), pod("ml", "batch", 7, ""), pod("kube-system", "dns", 30, ""),
		pod("kube-system", "proxy", 2, ""), pod("kube-system", "dcgm", 5, "DaemonSet")}
	for _, timing := range []Timing{DefaultTiming, {Reserve: DefaultReserve, Margin: 5 * time.Second}} {
		plan := Plan(pods, types.NamespacedName{}, timing, start, deadline)
		if len(plan) != len(pods) {
			t.Fatalf("planned %d pods, want %d", len(plan), len(pods))
		}
		for _, p := range plan {
			end := p.NotBefore.Add(p.Grace)
			if latest := deadline.Add(-timing.Margin + time.Second); end.After(latest) {
				t.Errorf("margin %s: %s/%s (grace %s, asked at +%s) ends at +%s, after +%s", timing.Margin, p.Pod.Namespace, p.Pod.Name,
					p.Grace, p.NotBefore.Sub(start), end.Sub(start), latest.Sub(start))
			}
			if !p.GroupDeadline.Before(deadline.Add(-timing.Margin + time.Nanosecond)) {
				t.Errorf("margin %s: %s's group ends at +%s, not before the margin", timing.Margin, p.Pod.Name, p.GroupDeadline.Sub(start))
			}
		}
	}
}

func TestCappedGrace(t *testing.T) {
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		grace, left, want time.Duration
	}{
		{60 * time.Second, 30 * time.Second, 30 * time.Second},
		{20 * time.Second, 30 * time.Second, 20 * time.Second},
		{20 * time.Second, 4200 * time.Millisecond, 4 * time.Second}, // rounded down: never past the deadline
		{0, 30 * time.Second, GraceFloor},                            // never a force delete
		{30 * time.Second, -5 * time.Second, GraceFloor},             // past the deadline
		{30 * time.Second, 0, GraceFloor},
	} {
		if got := CappedGrace(tc.grace, now, now.Add(tc.left)); got != tc.want {
			t.Errorf("CappedGrace(%s, %s left) = %s, want %s", tc.grace, tc.left, got, tc.want)
		}
	}
}

// measuredTail is the longest SIGTERM was seen to take to reach a real
// container after its eviction (a real kubelet on a loaded two-core
// machine): the part of a pod's grace the drain cannot see.
const measuredTail = 1980 * time.Millisecond

// TestNoGraceEndsAfterTheStopAtTheMeasuredTail: with the default timing,
// a pod of any group asked to stop at any moment before its group's
// deadline ends its grace before the VM stops, though SIGTERM reaches it
// measuredTail after the call. A grace rounded up to whole seconds, with a
// 2 s margin, ended up to 0.98 s past the stop.
func TestNoGraceEndsAfterTheStopAtTheMeasuredTail(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	stop := start.Add(30 * time.Second) // a preemption
	pods := []*corev1.Pod{pod("ml", "trainer", 60, ""), pod("kube-system", "dns", 30, ""), pod("ml", "agent-x", 5, "DaemonSet")}
	for i, gd := range GroupDeadlines(pods, DefaultTiming, start, stop) {
		for at := start; gd.Sub(at) >= GraceFloor; at = at.Add(37 * time.Millisecond) {
			for grace := time.Second; grace <= 30*time.Second; grace += time.Second {
				if end := at.Add(measuredTail + CappedGrace(grace, at, gd)); end.After(stop) {
					t.Fatalf("%s group: asked at %s with a %s grace: SIGTERM %s later, ends %s after the stop",
						Groups[i], at.Sub(start), grace, measuredTail, end.Sub(stop))
				}
			}
		}
	}
}

// A pod with a checkpoint lead is asked to stop on a whole second, the
// second it is told (the notice gives whole seconds), and still has its
// whole grace before the deadline.
func TestEvictAtIsAWholeSecondThatLeavesTheGrace(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 300*int(time.Millisecond), time.UTC)
	withLead := func(lead string, grace int64) *corev1.Pod {
		p := pod("ml", "trainer", grace, "")
		if lead != "" {
			p.Annotations = map[string]string{protocol.PodAnnotationCheckpointLead: lead}
		}
		return p
	}
	sec := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		deadline time.Time
		want     time.Time
	}{
		{"no lead: at once", withLead("", 10), sec(30), start},
		{"lead ends within the time: rounded up", withLead("5s", 10), sec(3600), sec(5.7)},          // 00:00:06
		{"lead past the latest: the latest, rounded down", withLead("5m", 4), sec(26.5), sec(21.7)}, // 22.5 s after start is 00:00:22.8
		{"no time for the grace: at once", withLead("5m", 40), sec(26.5), start},
	} {
		got := EvictAt(tc.pod, start, tc.deadline)
		if !got.Equal(tc.want) {
			t.Errorf("%s: EvictAt = %s, want %s", tc.name, got.Format(time.StampMilli), tc.want.Format(time.StampMilli))
		}
		if got.After(start) && (got.Nanosecond() != 0 || got.Add(PodGrace(tc.pod)).After(tc.deadline)) {
			t.Errorf("%s: EvictAt = %s: not a whole second, or the grace ends after the deadline %s", tc.name, got.Format(time.StampMilli), tc.deadline.Format(time.StampMilli))
		}
	}
}

func TestGroupDeadlines(t *testing.T) {
	began := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	workload := pod("ml", "trainer", 60, "")
	system := pod("kube-system", "dns", 30, "")
	daemon := pod("kube-system", "agent-x", 30, "DaemonSet")
	quick := pod("kube-system", "proxy", 5, "")
	for _, tc := range []struct {
		name    string
		pods    []*corev1.Pod
		reserve time.Duration
		margin  time.Duration
		budget  time.Duration
		want    []time.Duration // from began
	}{
		{"preemption: 15 s kept, split by need", []*corev1.Pod{workload, system, daemon}, DefaultReserve, 0, 30 * time.Second,
			[]time.Duration{15 * time.Second, 22 * time.Second, 30 * time.Second}},
		{"preemption with the default margin: every group ends by the deadline minus it, the reserve half of what is left", []*corev1.Pod{workload, system, daemon}, DefaultReserve, DefaultMargin, 30 * time.Second,
			[]time.Duration{13500 * time.Millisecond, 20 * time.Second, 27 * time.Second}},
		{"a margin of its own", []*corev1.Pod{workload}, DefaultReserve, 5 * time.Second, time.Hour,
			[]time.Duration{time.Hour - 5*time.Second, time.Hour - 5*time.Second, time.Hour - 5*time.Second}},
		{"host maintenance: the reserve is what the later groups need", []*corev1.Pod{workload, quick}, DefaultReserve, 0, time.Hour,
			[]time.Duration{time.Hour - 5*time.Second, time.Hour, time.Hour}},
		{"no system or DaemonSet pods: no reserve", []*corev1.Pod{workload}, DefaultReserve, 0, 30 * time.Second,
			[]time.Duration{30 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"never more than half the time left", []*corev1.Pod{workload, system}, time.Minute, 0, 20 * time.Second,
			[]time.Duration{10 * time.Second, 20 * time.Second, 20 * time.Second}},
		{"a zero reserve keeps none", []*corev1.Pod{workload, system}, 0, 0, 30 * time.Second,
			[]time.Duration{30 * time.Second, 30 * time.Second, 30 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GroupDeadlines(tc.pods, Timing{Reserve: tc.reserve, Margin: tc.margin}, began, began.Add(tc.budget))
			for i, g := range got {
				if g.Sub(began) != tc.want[i] {
					t.Errorf("%s group ends %s after the start, want %s", Groups[i], g.Sub(began), tc.want[i])
				}
			}
		})
	}
}

// TestNeed: a drain needs the longest checkpoint lead and grace of a
// workload pod, the reserve for the system and DaemonSet pods after it,
// and the margin; the agent itself, mirror pods and finished pods need
// nothing.
func TestNeed(t *testing.T) {
	pod := func(ns, name string, grace int64, lead string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}}, Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}}
		if lead != "" {
			p.Annotations[protocol.PodAnnotationCheckpointLead] = lead
		}
		return p
	}
	self := types.NamespacedName{Namespace: "mh", Name: "agent-x"}
	done := pod("team", "done", 3600, "")
	done.Status.Phase = corev1.PodSucceeded
	timing := Timing{Reserve: 15 * time.Second, Margin: 3 * time.Second}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want time.Duration
	}{
		{"none", nil, 3 * time.Second},
		{"30 s graces", []*corev1.Pod{pod("team", "a", 30, ""), pod("team", "b", 10, "")}, 33 * time.Second},
		{"a checkpoint lead", []*corev1.Pod{pod("team", "a", 30, "120s"), pod("team", "b", 60, "")}, 153 * time.Second},
		{"a system pod after the workload", []*corev1.Pod{pod("team", "a", 30, ""), pod("kube-system", "dns", 10, "")}, 43 * time.Second},
		{"the agent, and a finished pod, need nothing", []*corev1.Pod{pod("team", "a", 30, ""), pod("mh", "agent-x", 3600, ""), done}, 33 * time.Second},
	} {
		if got := Need(tc.pods, self, timing); got != tc.want {
			t.Errorf("%s: %s; want %s", tc.name, got, tc.want)
		}
	}
}
