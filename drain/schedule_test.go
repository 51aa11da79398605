package drain

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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

// staticPods is a PodSource that never changes.
type staticPods []*corev1.Pod

func (s staticPods) List() []*corev1.Pod      { return s }
func (s staticPods) Changed() <-chan struct{} { return nil }

func pod(ns, name string, grace int64, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "x", Controller: &yes}}
	}
	return p
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

// TestRefusedPodRetriedOnItsOwnSchedule: while another pod's eviction call
// has not returned, a refused pod is retried RetryInterval after its
// refusal, not after the other call.
func TestRefusedPodRetriedOnItsOwnSchedule(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	slow, protected := pod("ml", "slow", 5, ""), pod("ml", "protected", 5, "")
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	called := make(chan string, 16)
	recorded := make(outcomes, 16)
	record := func(name string) {
		mu.Lock()
		calls[name]++
		mu.Unlock()
		called <- name
	}
	d := New(Options{Client: slowClient{release, record}, Pods: staticPods{slow, protected}, RetryInterval: 5 * time.Second, Clock: clk, Recorder: recorded})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Drain(ctx, clk.Now().Add(time.Hour), Disruption{})
	}()
	defer func() { close(release); cancel(); <-done }()
	seen := map[string]bool{}
	for len(seen) < 2 {
		seen[<-called] = true
	}
	// Both called once; once the refusal is taken in, the retry interval
	// passes while the slow call still runs.
	if got := <-recorded; got != OutcomeBlocked {
		t.Fatalf("first outcome %q, want %q", got, OutcomeBlocked)
	}
	// The drain sets its timer for the retry after it has counted the
	// outcome: a step taken before that finds no timer. So the clock moves
	// a retry interval at a time until the retry comes (the slow call never
	// returns, so any retry is on the refused pod's own schedule).
	retried := false
	for i := 0; i < 300 && !retried; i++ {
		clk.Step(5 * time.Second)
		select {
		case got := <-called:
			if got != "protected" {
				t.Fatalf("after the retry interval %q was called, want protected retried", got)
			}
			retried = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !retried {
		t.Fatal("the refused pod was not retried while the other call ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["slow"] != 1 || calls["protected"] != 2 {
		t.Errorf("calls %v, want slow once (still running) and protected twice", calls)
	}
}

// slowClient holds the eviction of the pod named "slow" until release is
// closed, as a throttled API server would, and refuses every other
// eviction as a PodDisruptionBudget would.
type slowClient struct {
	release chan struct{}
	called  func(name string)
}

func (c slowClient) Evict(_ context.Context, ev *policyv1.Eviction) error {
	c.called(ev.Name)
	if ev.Name == "slow" {
		<-c.release
		return nil
	}
	return budgetRefusal()
}

// budgetRefusal is the 429 the API server answers when a
// PodDisruptionBudget refuses an eviction: the budget is its cause.
func budgetRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes,
		metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget b needs 1 healthy pods and has 1 currently"})
	return err
}

func (c slowClient) DeletePod(context.Context, string, string, metav1.DeleteOptions) error {
	return nil
}

func (c slowClient) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
}

// outcomes is a Recorder that hands each outcome on.
type outcomes chan string

func (o outcomes) Eviction(outcome string) { o <- outcome }
func (o outcomes) Escalation()             {}

// TestDrainerKeepsNoneAsNone: a Drainer's reserve and margin are zero when
// its timing says zero, as the agent's flags do, and the defaults when its
// options name no timing:
// the first eviction of a 60 s workload pod beside a kube-system pod, 30 s
// before the deadline, asks for 30 s with neither and for 13 s with the
// defaults (27 s to the margin, 13.5 s of it kept for the system pod,
// rounded down to whole seconds).
func TestDrainerKeepsNoneAsNone(t *testing.T) {
	for _, tc := range []struct {
		name            string
		reserve, margin time.Duration
		want            int64
	}{
		{"defaults", DefaultReserve, DefaultMargin, 13},
		{"none", 0, 0, 30},
		{"a margin alone", 0, DefaultMargin, 27},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
			graces := make(chan int64, 4)
			client := acceptingClient(func(e *policyv1.Eviction) { graces <- *e.DeleteOptions.GracePeriodSeconds })
			d := New(Options{Client: client, Pods: staticPods{pod("ml", "trainer", 60, ""), pod("kube-system", "dns", 30, "")},
				Timing: &Timing{Reserve: tc.reserve, Margin: tc.margin}, Clock: clk})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = d.Drain(ctx, clk.Now().Add(30*time.Second), Disruption{})
			}()
			got := <-graces
			cancel()
			<-done
			if got != tc.want {
				t.Errorf("the trainer was asked to stop with %d s, want %d s", got, tc.want)
			}
		})
	}
}

// acceptingClient accepts every eviction and hands it to seen.
type acceptingClient func(*policyv1.Eviction)

func (c acceptingClient) Evict(_ context.Context, e *policyv1.Eviction) error { c(e); return nil }
func (c acceptingClient) DeletePod(context.Context, string, string, metav1.DeleteOptions) error {
	return nil
}

func (c acceptingClient) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
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
