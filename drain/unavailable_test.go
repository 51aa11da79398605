package drain

import (
	"context"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// uncheckedClient is an API server whose eviction check does not answer:
// an eviction hangs until the caller gives up. It hands on each call.
type uncheckedClient struct {
	calls chan string
}

func (c *uncheckedClient) Evict(ctx context.Context, _ *policyv1.Eviction) error {
	c.calls <- "evict"
	<-ctx.Done()
	return ctx.Err()
}

func (c *uncheckedClient) DeletePod(context.Context, string, string, metav1.DeleteOptions) error {
	c.calls <- "delete"
	return nil
}

func (c *uncheckedClient) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
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
	client := &uncheckedClient{calls: make(chan string, 8)}
	seen, events := make(outcomes, 8), make(said, 8)
	// A 10 s grace and a 12 s deadline: the escalation comes 1 s in.
	d := New(Options{Client: client, Pods: staticPods{pod("ml", "trainer", 10, "")}, RetryInterval: time.Minute,
		Clock: clk, Recorder: seen, Events: events, Timing: &Timing{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Drain(ctx, clk.Now().Add(12*time.Second), Disruption{Reason: protocol.DisruptionPreemption})
	}()
	defer func() { cancel(); <-done }()

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
