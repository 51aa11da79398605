package drain_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// countingAPI is the agent's client, counting the eviction requests for
// each pod.
type countingAPI struct {
	*kube.Client
	mu       sync.Mutex
	requests map[string]int
}

func (c *countingAPI) Evict(ctx context.Context, e *policyv1.Eviction) error {
	c.mu.Lock()
	c.requests[e.Name]++
	c.mu.Unlock()
	return c.Client.Evict(ctx, e)
}

// TestDrainEvictsTheMomentTheBudgetAllows: three pods of a Deployment
// under a budget that keeps two available, their replacements starting on
// another node. The drain follows the budget: each refused pod is evicted
// once its budget allows again, with the fixed retry interval (10 min)
// far longer than the test may take, so only the budget can have woken it;
// and no pod is asked more often than once, plus once per change of the
// budget.
func TestDrainEvictsTheMomentTheBudgetAllows(t *testing.T) {
	c := budgetChain(t, "budget")
	if c.res.Evicted != 3 || len(c.res.Left) > 0 {
		t.Fatalf("result %+v, want the three pods evicted", c.res)
	}
	if c.blocked < 2 {
		t.Errorf("the budget refused %d evictions, want at least the two it held at first", c.blocked)
	}
	for pod, asked := range c.requests {
		if asked > 1+c.changes {
			t.Errorf("%s was asked to be evicted %d times, with %d changes of its budget: more than once per change", pod, asked, c.changes)
		}
	}
	t.Logf("eviction requests %v over %d changes of the budget; each step after its budget allowed: %v", c.requests, c.changes, c.steps)
}

// BenchmarkBudgetChain: the chain of TestDrainEvictsTheMomentTheBudgetAllows;
// it reports how long after its budget allowed again (a replacement Ready
// on the other node) each held pod was evicted.
func BenchmarkBudgetChain(b *testing.B) {
	var steps []time.Duration
	for i := 0; b.Loop(); i++ {
		c := budgetChain(b, fmt.Sprintf("chain-%d", i))
		steps = append(steps, c.steps...)
	}
	slices.Sort(steps)
	if len(steps) == 0 {
		b.Fatal("no pod waited for its budget")
	}
	b.ReportMetric(float64(steps[len(steps)/2].Microseconds())/1000, "p50-ms-after-allowed")
	b.ReportMetric(float64(steps[len(steps)-1].Microseconds())/1000, "max-ms-after-allowed")
	fmt.Printf("budget chain: %d held pods evicted p50 %s, max %s after their budget allowed\n", len(steps),
		steps[len(steps)/2].Round(time.Millisecond), steps[len(steps)-1].Round(time.Millisecond))
}

// chain is what budgetChain saw.
type chain struct {
	res      drain.Result
	blocked  int            // refusals
	requests map[string]int // eviction requests by pod
	changes  int            // changes of the budget during the drain
	// steps: for each pod evicted after a refusal, how long after the
	// budget last turned to allow it was seen terminating.
	steps []time.Duration
}

// budgetChain drains a node of three pods of a Deployment under a budget
// that keeps two available, their replacements starting on another node,
// with the fixed retry interval (10 min) far longer than the drain may
// take, so that only the budget can wake a refused pod.
func budgetChain(tb testing.TB, prefix string) chain {
	tb.Helper()
	testworld.Need(tb)
	ns := world.Namespace(tb)
	pool := map[string]string{"budget-chain": ns}
	old := prefix + "-old"
	world.NodeT(tb, testworld.NodeSpec{Name: old, Labels: pool})
	labels := map[string]string{"app": "chain"}
	replicas := int32(3)
	tmpl := podSpec(ns, "", "", 1, time.Second, labels)
	// No toleration of everything: a cordoned node takes none of them.
	tmpl.Spec.NodeName, tmpl.Spec.NodeSelector, tmpl.Spec.Tolerations = "", pool, nil
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chain"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := world.Client.AppsV1().Deployments(ns).Create(testworld.Ctx(tb, 10*time.Second), dep, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	healthy := world.Budget(tb, ns, "chain", labels, intstr.FromInt32(2), "three healthy, one disruption allowed", func(b *policyv1.PodDisruptionBudget) bool {
		return b.Status.CurrentHealthy == 3 && b.Status.DisruptionsAllowed == 1
	})
	world.WaitRunning(tb, old, 3)
	// The replacements start on a node of their own; the old one takes no
	// new pod, as the drained node's taint keeps them off it.
	world.NodeT(tb, testworld.NodeSpec{Name: prefix + "-new", Labels: pool})
	cordon(tb, old)

	allowed := followBudget(tb, ns, "chain", healthy.ResourceVersion)
	steps := observe(tb, old)
	api := &countingAPI{Client: apiClient(tb), requests: map[string]int{}}
	rec := &recorder{}
	d := drain.New(drain.Options{Client: api, Pods: startPods(tb, old), RetryInterval: 10 * time.Minute,
		Budgets: api.BudgetListWatch, Recorder: rec, Events: rec})
	res, err := d.DrainVoluntary(testworld.Ctx(tb, 3*time.Minute), time.Now().Add(5*time.Minute))
	if err != nil {
		tb.Fatal(err)
	}
	turns, changes := allowed()
	c := chain{res: res, blocked: rec.count(drain.OutcomeBlocked), changes: changes}
	api.mu.Lock()
	c.requests = maps.Clone(api.requests)
	api.mu.Unlock()
	for _, s := range steps() {
		if s.kind != "terminating" || api.requests[strings.TrimPrefix(s.pod, ns+"/")] < 2 {
			continue
		}
		// The last turn of the budget to allow before the eviction.
		var last time.Time
		for _, at := range turns {
			if at.Before(s.at) {
				last = at
			}
		}
		if !last.IsZero() {
			c.steps = append(c.steps, s.at.Sub(last))
		}
	}
	return c
}

// followBudget watches the budget ns/name from version rv on; the
// function returned says when it turned to allow a disruption (from none)
// and how many times it changed.
func followBudget(tb testing.TB, ns, name, rv string) func() ([]time.Time, int) {
	tb.Helper()
	w, err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Watch(testworld.Ctx(tb, 5*time.Minute), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var turns []time.Time
	n, allowing := 0, true
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			b, ok := ev.Object.(*policyv1.PodDisruptionBudget)
			if !ok || b.Name != name || ev.Type != watch.Modified {
				continue
			}
			mu.Lock()
			n++
			now := b.Status.DisruptionsAllowed > 0
			if now && !allowing {
				turns = append(turns, time.Now())
			}
			allowing = now
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() { w.Stop(); <-done })
	return func() ([]time.Time, int) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(turns), n
	}
}

// cordon marks node unschedulable.
func cordon(t testing.TB, node string) {
	t.Helper()
	_, err := world.Client.CoreV1().Nodes().Patch(testworld.Ctx(t, 10*time.Second), node, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
