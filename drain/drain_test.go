package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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

// throttlingClient answers the first throttled evictions with the 429 of
// the API server's own rate limits (API Priority and Fairness: a text
// body and Retry-After, no budget as its cause), then accepts; it hands
// on each call.
type throttlingClient struct {
	throttled int
	calls     chan string // "evict" or "delete"
}

func (c *throttlingClient) Evict(_ context.Context, e *policyv1.Eviction) error {
	c.calls <- "evict"
	if c.throttled > 0 {
		c.throttled--
		return apierrors.NewGenericServerResponse(429, "create", schema.GroupResource{Resource: "pods/eviction"}, e.Name,
			"Too many requests, please try again later.", 3, true)
	}
	return nil
}

func (c *throttlingClient) DeletePod(context.Context, string, string, metav1.DeleteOptions) error {
	c.calls <- "delete"
	return nil
}

func (c *throttlingClient) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
}

// TestThrottledEvictionIsNoBudget: an eviction the API server throttles
// (429 without a budget's cause) is tried again after its Retry-After, not
// the retry interval; it sends no budget Warning and is never escalated
// to a delete, even in a forced drain whose escalation time passes. (A
// budget's 429, its cause named, still is a refusal: the slow-call test
// above, and the world's drain tests against a real budget.)
func TestThrottledEvictionIsNoBudget(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	client := &throttlingClient{throttled: 2, calls: make(chan string, 8)}
	// A 10 s grace and a 12 s deadline: the escalation time (deadline less
	// the grace and the margin) comes within the first retry.
	seen, events := drainTrainer(t, clk, client, clk.Now().Add(12*time.Second), Disruption{})

	for try := 1; try <= 3; try++ {
		select {
		case call := <-client.calls:
			if call != "evict" {
				t.Fatalf("call %d: %s, want an eviction", try, call)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no eviction %d", try)
		}
		want := OutcomeThrottled
		if try == 3 {
			want = OutcomeEvicted
		}
		if got := <-seen; got != want {
			t.Fatalf("eviction %d: %s, want %s", try, got, want)
		}
		if try == 3 {
			break
		}
		// The retry comes 3 s later (Retry-After), not a minute later:
		// the clock moves 3 s, and the next call must come.
		for range 3 {
			stepWhenWaiting(t, clk, time.Second)
		}
	}
	select {
	case reason := <-events:
		t.Errorf("a throttled eviction sent the Event %s", reason)
	default:
	}
}

// stepWhenWaiting steps clk by d once a goroutine waits on it.
func stepWhenWaiting(t *testing.T, clk *testingclock.FakeClock, d time.Duration) {
	t.Helper()
	for start := time.Now(); !clk.HasWaiters(); {
		if time.Since(start) > time.Minute {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(d)
}

// drainTrainer drains one pod, ml/trainer with a 10 s grace, through
// client by deadline (a minute between retries, no reserve or margin) on
// clk, until t ends; it returns what the drain counts and says.
func drainTrainer(t *testing.T, clk *testingclock.FakeClock, client API, deadline time.Time, why Disruption) (outcomes, said) {
	t.Helper()
	seen, events := make(outcomes, 8), make(said, 8)
	d := New(Options{Client: client, Pods: staticPods{pod("ml", "trainer", 10, "")}, RetryInterval: time.Minute,
		Clock: clk, Recorder: seen, Events: events, Timing: &Timing{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Drain(ctx, deadline, why)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return seen, events
}

// scriptedClient answers evictions from its script in turn (errHang:
// hang until the caller gives up, as an API server whose eviction check
// does not answer), then accepts them; it deletes and hands on each call
// as throttlingClient does.
type scriptedClient struct {
	throttlingClient
	script []error
}

var errHang = errors.New("hang")

func (c *scriptedClient) Evict(ctx context.Context, _ *policyv1.Eviction) error {
	c.calls <- "evict"
	if len(c.script) == 0 {
		return nil
	}
	err := c.script[0]
	c.script = c.script[1:]
	if err == errHang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// said is an EventSink that hands on each Event as "reason: message".
type said chan string

func (s said) NodeEvent(_ bool, reason, msg string) { s <- reason + ": " + msg }

// TestUnavailableCheckEscalatesAtTheLastMoment: in a forced drain whose
// evictions cannot be checked, an eviction the API server holds returns
// when the pod's escalation time comes (not when the API server gives up),
// the first failure is a Warning saying what comes next, and at
// deadline - grace - EscalationLead the pod is deleted through the delete,
// the Warning naming the failure, not a budget.
func TestUnavailableCheckEscalatesAtTheLastMoment(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	client := &scriptedClient{throttlingClient: throttlingClient{calls: make(chan string, 8)}, script: []error{errHang}}
	// A 10 s grace and a 12 s deadline: the escalation comes 1 s in.
	seen, events := drainTrainer(t, clk, client, clk.Now().Add(12*time.Second), Disruption{Reason: protocol.DisruptionPreemption})

	next := func(what string) string {
		t.Helper()
		select {
		case call := <-client.calls:
			return call
		case <-time.After(time.Minute):
			t.Fatalf("no call: %s", what)
		}
		return ""
	}
	if call := next("the first eviction"); call != "evict" {
		t.Fatalf("first call: %s", call)
	}
	// The hung call ends at the escalation time (1 s of real time here),
	// not the API server's.
	select {
	case got := <-seen:
		if got != OutcomeError {
			t.Fatalf("the hung eviction: %s, want %s", got, OutcomeError)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the hung eviction did not return by the pod's escalation time")
	}
	if e := <-events; !strings.HasPrefix(e, protocol.EventEvictionFailed+": ") || !strings.Contains(e, "deleting it at 2026-11-27T09:00:01Z so that it still gets its 10s grace period") {
		t.Errorf("first failure's Event %q", e)
	}
	stepWhenWaiting(t, clk, time.Second)
	if call := next("the escalation"); call != "delete" {
		t.Fatalf("at the escalation time: %s, want the delete", call)
	}
	if got := <-seen; got != OutcomeEscalated {
		t.Errorf("escalation: %s", got)
	}
	e := <-events
	if !strings.HasPrefix(e, protocol.EventEscalated+": ") || !strings.Contains(e, "was still failing (context deadline exceeded)") || strings.Contains(e, "PodDisruptionBudget") {
		t.Errorf("escalation's Event %q, want the failure named, not a budget", e)
	}
}

// TestBudgetRefusalAfterAFailureIsSaid: a pod whose first eviction failed
// (the check unreachable) and whose next one a budget refuses gets both
// Warnings, each once: the failure, then the budget's.
func TestBudgetRefusalAfterAFailureIsSaid(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	unreachable := apierrors.NewInternalError(errors.New(`failed calling webhook "evictions.maintenance-handler.io": no endpoints available`))
	client := &scriptedClient{throttlingClient: throttlingClient{calls: make(chan string, 8)}, script: []error{unreachable, budgetRefusal(), budgetRefusal()}}
	seen, events := drainTrainer(t, clk, client, clk.Now().Add(time.Hour), Disruption{Reason: protocol.DisruptionHostMaintenance})
	for i, want := range []string{OutcomeError, OutcomeBlocked, OutcomeBlocked} {
		<-client.calls
		if got := <-seen; got != want {
			t.Fatalf("eviction %d: %s, want %s", i+1, got, want)
		}
		if i < 2 {
			stepWhenWaiting(t, clk, time.Minute)
		}
	}
	var reasons []string
	for len(events) > 0 {
		e := <-events
		reasons = append(reasons, e[:strings.Index(e, ":")])
	}
	if want := []string{protocol.EventEvictionFailed, protocol.EventBlocked}; !slices.Equal(reasons, want) {
		t.Errorf("Events %v, want %v", reasons, want)
	}
}

// hangingPatchClient is scriptedClient whose PatchPod hangs until the
// caller gives up, as a throttled API server's can.
type hangingPatchClient struct{ scriptedClient }

func (c *hangingPatchClient) PatchPod(ctx context.Context, _, _ string, _ types.PatchType, _ []byte, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestEscalationDeletesThoughItsConditionHangs: at the escalation time,
// the DisruptionTarget condition's patch hanging (a throttled API server)
// does not hold the delete back: the patch is given up within its bound
// and the pod deleted.
func TestEscalationDeletesThoughItsConditionHangs(t *testing.T) {
	escalationCallTimeout = 50 * time.Millisecond
	t.Cleanup(func() { escalationCallTimeout = 10 * time.Second })
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	client := &hangingPatchClient{scriptedClient{throttlingClient: throttlingClient{calls: make(chan string, 8)}, script: []error{errHang}}}
	seen, _ := drainTrainer(t, clk, client, clk.Now().Add(12*time.Second), Disruption{Reason: protocol.DisruptionPreemption})
	if call := <-client.calls; call != "evict" {
		t.Fatalf("first call: %s", call)
	}
	if got := <-seen; got != OutcomeError {
		t.Fatalf("the hung eviction: %s, want %s", got, OutcomeError)
	}
	stepWhenWaiting(t, clk, time.Second)
	select {
	case call := <-client.calls:
		if call != "delete" {
			t.Fatalf("at the escalation time: %s, want the delete", call)
		}
	case <-time.After(time.Minute):
		t.Fatal("no delete: the hanging condition patch held it back")
	}
	if got := <-seen; got != OutcomeEscalated {
		t.Errorf("escalation: %s", got)
	}
}
