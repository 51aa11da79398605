package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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
