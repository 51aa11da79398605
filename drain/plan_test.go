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
			due, wake := planRound(tc.now, now, deadline, !tc.voluntary, tc.pods, states)
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
