package manifests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// evictionWebhook is the shipped webhook configuration of the eviction
// check.
const evictionWebhook = "maintenance-handler-agent-evictions"

// hostEvictionCheck serves the eviction check from the test's process as
// an aggregator replica serves it (package admission, with the
// aggregator's service-account token, so through its RBAC: the CA's
// Secret in ns, the webhook configuration, the pods it reads), and points
// the shipped webhook configuration at it by URL, keeping its caBundle:
// the API server cannot reach a replica that kwok plays, nor one drained
// off the world's one real node. It waits until the configuration holds
// the CA and returns the check's metrics; the check stops when tb ends.
func hostEvictionCheck(tb testing.TB, ns string) *metrics.EvictionCheck {
	tb.Helper()
	m, _ := hostEvictionCheckFor(tb, ns, nil)
	return m
}

// hostEvictionCheckFor is hostEvictionCheck answering only callers (as
// --eviction-check-callers does; none: any caller); it returns the
// check's address too.
func hostEvictionCheckFor(tb testing.TB, ns string, callers []string) (*metrics.EvictionCheck, string) {
	tb.Helper()
	if len(callers) == 0 {
		return hostEvictionCheckWith(tb, ns, nil, nil)
	}
	return hostEvictionCheckWith(tb, ns, func(review admission.TokenReviewer, m *metrics.EvictionCheck) *admission.Callers {
		return admission.NewCallers(review, callers, m.CallerRefused)
	}, nil)
}

// hostEvictionCheckWith is hostEvictionCheck answering only the callers
// callersOf makes (nil: any caller), with the aggregator's token's
// reviews and the check's metrics, holding sources to their budgets (nil:
// the product's) and remembering the pods read, as the aggregator does.
func hostEvictionCheckWith(tb testing.TB, ns string, callersOf func(admission.TokenReviewer, *metrics.EvictionCheck) *admission.Callers, sources *admission.Sources) (*metrics.EvictionCheck, string) {
	tb.Helper()
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(testworld.Ctx(tb, 10*time.Second), "maintenance-handler-aggregator", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := world.ConfigForToken(tr.Status.Token)
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	client, err := kube.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	addr := testworld.FreeAddrT(tb)
	pointEvictionCheck(tb, map[string]any{"url": "https://" + addr + admission.Path})

	logger := slog.New(slog.DiscardHandler)
	m := metrics.NewEvictionCheck(prometheus.NewRegistry())
	certs := &admission.Certs{
		Secrets: typed.CoreV1().Secrets(ns), SecretName: "maintenance-handler-eviction-check",
		Webhooks: typed.AdmissionregistrationV1().ValidatingWebhookConfigurations(), Webhook: evictionWebhook,
		Hosts: []string{"127.0.0.1"}, Clock: clock.RealClock{}, Logger: logger,
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	if sources == nil {
		sources = admission.NewSources(nil, logger)
	}
	var check http.Handler = &admission.Check{Pods: client.GetPod, Metrics: m, Sources: sources, Nodes: &admission.PodNodes{}, Clock: clock.RealClock{}, Logger: logger}
	if callersOf != nil {
		check = callersOf(typed.AuthenticationV1().TokenReviews().Create, m).Wrap(check)
	}
	if _, err := admission.Serve(ctx, g, addr, check, certs, nil); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = g.Wait()
	})
	testworld.WaitFor(tb, world.Client.AdmissionregistrationV1().RESTClient(), "validatingwebhookconfigurations", "", evictionWebhook, "the check's CA in its caBundle",
		func(c *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return len(c.Webhooks) == 1 && len(c.Webhooks[0].ClientConfig.CABundle) > 0 && c.Webhooks[0].ClientConfig.URL != nil
		})
	return m, addr
}

// pointEvictionCheck makes the webhook configuration call the check at
// clientConfig's url or service, keeping its caBundle.
func pointEvictionCheck(tb testing.TB, to map[string]any) {
	tb.Helper()
	hooks := world.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	c, err := hooks.Get(testworld.Ctx(tb, 10*time.Second), evictionWebhook, metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	cc := map[string]any{"caBundle": c.Webhooks[0].ClientConfig.CABundle}
	for k, v := range to {
		cc[k] = v
	}
	patch, _ := json.Marshal([]map[string]any{{"op": "replace", "path": "/webhooks/0/clientConfig", "value": cc}})
	if _, err := hooks.Patch(testworld.Ctx(tb, 10*time.Second), evictionWebhook, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// evictAs evicts namespace/name as c, naming the pod's UID as the agent
// does (the admin reads it; none if the pod is not there).
func evictAs(tb testing.TB, c kubernetes.Interface, namespace, name string) error {
	var uid *types.UID
	if p, err := world.Client.CoreV1().Pods(namespace).Get(testworld.Ctx(tb, 10*time.Second), name, metav1.GetOptions{}); err == nil {
		uid = &p.UID
	}
	return evictUID(tb, c, namespace, name, uid)
}

// evictUID evicts namespace/name as c, with uid as its precondition (nil:
// none).
func evictUID(tb testing.TB, c kubernetes.Interface, namespace, name string, uid *types.UID) error {
	e := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if uid != nil {
		e.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: uid}}
	}
	return c.PolicyV1().Evictions(namespace).Evict(testworld.Ctx(tb, 20*time.Second), e)
}

// evictWhenServed evicts namespace/name as c, again while the API server
// fails to call the check (it sees a changed configuration a moment
// later), as the agent's drain retries; the check's answer, or any other,
// is returned at once.
func evictWhenServed(tb testing.TB, c kubernetes.Interface, namespace, name string) error {
	tb.Helper()
	return evictWhenServedBy(tb, func() error { return evictAs(tb, c, namespace, name) })
}

// evictWhenServedBy calls evict again while the API server fails to call
// the check, as evictWhenServed does.
func evictWhenServedBy(tb testing.TB, evict func() error) error {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := evict()
		if err == nil || !checkCallFailed(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkCallFailed: the API server could not call the eviction check (as
// opposed to the check's answer).
func checkCallFailed(err error) bool {
	return err != nil && strings.Contains(err.Error(), `failed calling webhook "evictions.maintenance-handler.io"`)
}

// podOn creates a pod bound to node in namespace, deleted when tb ends.
func podOn(tb testing.TB, namespace, name, node string) {
	tb.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods(namespace).Create(testworld.Ctx(tb, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
		tb.Fatal(fmt.Errorf("pod %s/%s: %w", namespace, name, err))
	}
	tb.Cleanup(func() {
		zero := int64(0)
		_ = world.Client.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// deletion is when a watch first saw a pod terminating, and with what
// grace.
type deletion struct {
	at    time.Time
	grace int64
}

// watchDeletions records, through watches of namespaces, each pod's first
// deletion.
func watchDeletions(t testing.TB, namespaces ...string) func() map[string]deletion {
	t.Helper()
	var mu sync.Mutex
	got := map[string]deletion{}
	for _, ns := range namespaces {
		w, err := world.Client.CoreV1().Pods(ns).Watch(testworld.Ctx(t, 10*time.Minute), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				p, ok := e.Object.(*corev1.Pod)
				if !ok || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil {
					continue
				}
				mu.Lock()
				if _, seen := got[p.Namespace+"/"+p.Name]; !seen {
					got[p.Namespace+"/"+p.Name] = deletion{at: time.Now(), grace: *p.DeletionGracePeriodSeconds}
				}
				mu.Unlock()
			}
		}()
	}
	return func() map[string]deletion {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(got)
	}
}

// agentDrainsWhileTheCheckIsDown: with no replica serving the eviction
// check, the agent (its pod-bound token) still drains its node under a
// 30 s preemption: every eviction fails, the agent says so, and deletes
// each pod, through the fenced delete, in drain order (workloads, then
// kube-system), each with its whole grace ending before the stop, the one
// a PodDisruptionBudget holds included.
func agentDrainsWhileTheCheckIsDown(t *testing.T) {
	const ns, node = "maintenance-handler", "rbac-gpu-e"
	world.NodeT(t, testworld.NodeSpec{Name: node})
	agent := agentPodOn(t, node)
	// The configuration calls the check's Service again, which has no
	// endpoint: no replica answers.
	pointEvictionCheck(t, map[string]any{"service": map[string]any{"namespace": ns, "name": "maintenance-handler-eviction-check", "path": admission.Path, "port": 443}})
	tr := agentToken(t, agent)
	wns := world.Namespace(t)
	pods := []struct {
		ns, name string
		grace    int64
	}{{wns, "guarded", 5}, {wns, "free", 3}, {"kube-system", "sys-" + wns, 2}}
	for _, w := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: w.name, Labels: map[string]string{"app": w.name}},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &w.grace, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
		if _, err := world.Client.CoreV1().Pods(w.ns).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = world.Client.CoreV1().Pods(w.ns).Delete(context.Background(), w.name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		world.WaitPod(t, w.ns, w.name, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	world.Budget(t, wns, "guarded", map[string]string{"app": "guarded"}, intstr.FromInt32(1), "counting the pod",
		func(p *policyv1.PodDisruptionBudget) bool { return p.Status.CurrentHealthy == 1 })
	deletions := watchDeletions(t, wns, "kube-system")

	v := agentVM(t, node, tr.Status.Token, "--node-name", node, "--pod-namespace", agent.Namespace, "--pod-name", agent.Name,
		"--policy-configmap", ns+"/maintenance-handler")
	world.WaitNode(t, node, "the agent's boot ID", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	start := time.Now()
	v.Emu.SetPreempted(true)
	world.WaitNode(t, node, "terminating: drained", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	stop := start.Add(30 * time.Second)
	got := deletions()
	for _, w := range pods {
		d, ok := got[w.ns+"/"+w.name]
		switch {
		case !ok:
			t.Errorf("%s/%s was not deleted", w.ns, w.name)
		case d.grace != w.grace:
			t.Errorf("%s/%s was deleted with a %d s grace, want its own %d s", w.ns, w.name, d.grace, w.grace)
		case d.at.Add(time.Duration(w.grace) * time.Second).After(stop):
			t.Errorf("%s/%s's grace ends %s after the stop", w.ns, w.name, d.at.Add(time.Duration(w.grace)*time.Second).Sub(stop))
		default:
			t.Logf("%s/%s deleted %.2fs into the preemption, its %d s grace ending %.2fs before the stop", w.ns, w.name, d.at.Sub(start).Seconds(), w.grace, stop.Sub(d.at).Seconds()-float64(w.grace))
		}
	}
	if sys := got["kube-system/sys-"+wns].at; !sys.After(got[wns+"/guarded"].at) || !sys.After(got[wns+"/free"].at) {
		t.Errorf("the kube-system pod was deleted before a workload")
	}
	world.WaitEvent(t, node, protocol.EventEvictionFailed)
	world.WaitEvent(t, node, protocol.EventEscalated)
	if c := eventCount(t, node, protocol.EventBlocked); c != 0 {
		t.Errorf("%d %s Events: no budget was asked", c, protocol.EventBlocked)
	}
}

// agentToken is a token of the agent's service account bound to its pod,
// as the kubelet mounts it: its user info names the pod's node.
func agentToken(tb testing.TB, pod *corev1.Pod) *authnv1.TokenRequest {
	tb.Helper()
	tr, err := world.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(testworld.Ctx(tb, 10*time.Second), "maintenance-handler-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}
