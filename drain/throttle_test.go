package drain

import (
	"context"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

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
