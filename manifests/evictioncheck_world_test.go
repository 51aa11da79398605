package manifests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
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
	if _, err := admission.Serve(ctx, g, addr, &admission.Check{Pods: client.GetPod, Metrics: m, Clock: clock.RealClock{}, Logger: logger}, certs); err != nil {
		cancel()
		tb.Fatal(err)
	}
	g.Go(func() error { return certs.Start(ctx) })
	tb.Cleanup(func() {
		cancel()
		_ = g.Wait()
	})
	testworld.WaitFor(tb, world.Client.AdmissionregistrationV1().RESTClient(), "validatingwebhookconfigurations", "", evictionWebhook, "the check's CA in its caBundle",
		func(c *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return len(c.Webhooks) == 1 && len(c.Webhooks[0].ClientConfig.CABundle) > 0 && c.Webhooks[0].ClientConfig.URL != nil
		})
	return m
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

// evictAs evicts namespace/name as c.
func evictAs(tb testing.TB, c kubernetes.Interface, namespace, name string) error {
	return c.PolicyV1().Evictions(namespace).Evict(testworld.Ctx(tb, 20*time.Second), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}})
}

// evictWhenServed evicts namespace/name as c, again while the API server
// fails to call the check (it sees a changed configuration a moment
// later), as the agent's drain retries; the check's answer, or any other,
// is returned at once.
func evictWhenServed(tb testing.TB, c kubernetes.Interface, namespace, name string) error {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := evictAs(tb, c, namespace, name)
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
