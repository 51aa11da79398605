package drain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPlanRoundRequests: with the EvictionRequest API, a pod that names
// eviction responders is first asked through a request; its responders
// then have until the last moment that leaves it its grace, when a forced
// drain deletes it and a voluntary one evicts it. A pod whose request
// could not be written, one in a scheduling group, and every pod where the
// API is not used are evicted at once.
func TestPlanRoundRequests(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	deadline := now.Add(10 * time.Minute)
	pod := func(name string, responders bool) *corev1.Pod {
		grace := int64(30)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}}
		if responders {
			priority := int32(10000)
			p.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: "checkpointer.example.com/trainer", Priority: &priority}}
		}
		return p
	}
	grouped := pod("grouped", true)
	grouped.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{}
	fallback := EscalateAt(pod("", false), deadline)
	asked := func() map[types.UID]*podState {
		return map[types.UID]*podState{"trainer": {requested: true, fallbackAt: fallback, nextTry: fallback}}
	}
	type call struct {
		Pod               string
		Request, Escalate bool
	}
	for _, tc := range []struct {
		name      string
		now       time.Time
		requests  bool
		voluntary bool
		pods      []*corev1.Pod
		states    map[types.UID]*podState
		want      []call
		wantWake  time.Time
	}{
		{"responders: asked through a request; others evicted", now, true, false,
			[]*corev1.Pod{pod("trainer", true), pod("plain", false), grouped}, nil,
			[]call{{"trainer", true, false}, {"plain", false, false}, {"grouped", false, false}}, deadline.Add(EndSlack)},
		{"asked: left to its responders until its fallback", now.Add(time.Minute), true, false,
			[]*corev1.Pod{pod("trainer", true)}, asked(), nil, fallback},
		{"its fallback, forced: deleted with its grace", fallback, true, false,
			[]*corev1.Pod{pod("trainer", true)}, asked(), []call{{"trainer", false, true}}, deadline.Add(EndSlack)},
		{"its fallback, voluntary: evicted", fallback, true, true,
			[]*corev1.Pod{pod("trainer", true)}, asked(), []call{{"trainer", false, false}}, deadline.Add(EndSlack)},
		{"no request could be written: evicted", now, true, false,
			[]*corev1.Pod{pod("trainer", true)}, map[types.UID]*podState{"trainer": {noRequest: true}}, []call{{"trainer", false, false}}, deadline.Add(EndSlack)},
		{"the API not used: evicted", now, false, false,
			[]*corev1.Pod{pod("trainer", true)}, nil, []call{{"trainer", false, false}}, deadline.Add(EndSlack)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := tc.states
			if states == nil {
				states = map[types.UID]*podState{}
			}
			due, wake := planRound(tc.now, now, deadline, !tc.voluntary, tc.requests, tc.pods, states)
			var got []call
			for _, a := range due {
				got = append(got, call{a.pod.Name, a.request, a.escalate})
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if !wake.Equal(tc.wantWake) {
				t.Errorf("wake at %s, want %s", wake.Sub(now), tc.wantWake.Sub(now))
			}
		})
	}
}
