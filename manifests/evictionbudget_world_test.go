package manifests_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestHostileAgentSpendsItsOwnEvictionBudget: with the base applied and
// the check served (its budgets as shipped, but never refilled, so that
// the count does not hang on time), node A's agent token evicting a pod of
// node B through the API server is refused (403), and its evictions of
// pods that are not there (404), each after a pod read, 20 in all; then it
// is refused unread (429, counted as over-budget). B's agent, whose
// evictions come from the same API server, still evicts its own pod.
func TestHostileAgentSpendsItsOwnEvictionBudget(t *testing.T) {
	testworld.Need(t)
	const a, b = "budget-a", "budget-b"
	world.NodeT(t, testworld.NodeSpec{Name: a})
	world.NodeT(t, testworld.NodeSpec{Name: b})
	apply(t, render(t, "base"))
	agentA, agentB := agentPodOn(t, a), agentPodOn(t, b)
	scaleAggregatorToZero(t)
	sources := admission.NewSources(nil, slog.New(slog.DiscardHandler))
	sources.Rate, sources.AddressRate = 0, 0
	check, _ := hostEvictionCheckWith(t, testworld.ShippedNamespace, nil, sources)
	clientOf := func(token string) kubernetes.Interface {
		c, err := kubernetes.NewForConfig(world.ConfigForToken(token))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hostile, honest := clientOf(agentToken(t, agentA).Status.Token), clientOf(agentToken(t, agentB).Status.Token)
	const victim, own = "budget-victim", "budget-own"
	podOn(t, "default", victim, b)
	podOn(t, "default", own, b)

	if err := evictWhenServed(t, hostile, "default", victim); !apierrors.IsForbidden(err) {
		t.Fatalf("%s's agent evicting %s on %s: %v, want 403", a, victim, b, err)
	}
	// Pods that are not there, each named anew, each read.
	madeUp := func(i int) error {
		uid := types.UID(fmt.Sprint("made-up-", i))
		return evictUID(t, hostile, "default", fmt.Sprint("budget-gone-", i), &uid)
	}
	for i := 2; i <= sources.Burst; i++ {
		if err := madeUp(i); !apierrors.IsNotFound(err) {
			t.Fatalf("%s's agent evicting a pod that is not there, refusal %d: %v, want 404", a, i, err)
		}
	}
	for i := range 5 {
		if err := madeUp(sources.Burst + 1 + i); !apierrors.IsTooManyRequests(err) {
			t.Errorf("%s's agent evicting a pod that is not there, past its budget: %v, want 429", a, err)
		}
	}
	if err := evictAs(t, honest, "default", own); err != nil {
		t.Errorf("%s's agent evicting its own pod %s after %s spent its budget: %v, want allowed", b, own, a, err)
	}
	if _, err := world.Client.CoreV1().Pods("default").Get(testworld.Ctx(t, 10*time.Second), victim, metav1.GetOptions{}); err != nil {
		t.Errorf("%s: %v, want still there", victim, err)
	}
	if got := testutil.ToFloat64(check.CallersRefused.WithLabelValues(admission.CallerOverBudget)); got != 5 {
		t.Errorf("over-budget refusals %v, want 5", got)
	}
	if got := testutil.ToFloat64(check.Checks.WithLabelValues(admission.Refused)); got != float64(sources.Burst+5) {
		t.Errorf("refused checks %v, want %d", got, sources.Burst+5)
	}
}
