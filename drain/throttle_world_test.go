package drain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	admissionv1 "k8s.io/api/admission/v1"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestDrainWaitsOutTheAPIServersThrottling: API Priority and Fairness is on
// in the test world, as in every real cluster, and a flow schema gives the
// drain's user a priority level of one request at a time that rejects the
// rest; while another request of the user holds it, the API server answers
// every eviction 429 itself, with Retry-After and no budget as its cause.
// The drain waits: it counts the outcome throttled, sends no budget
// Warning and deletes nothing; once the level is free, the pod is evicted
// with its whole grace, while a real budget's 429 (a second pod's) still
// is a budget's refusal, told and escalated.
func TestDrainWaitsOutTheAPIServersThrottling(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	const node = "drain-throttled-0"
	addNode(t, node)
	ns := world.Namespace(t)
	create(t, podSpec(ns, "trainer", node, 6, time.Second, nil))
	guarded := map[string]string{"app": "guarded"}
	create(t, podSpec(ns, "guarded", node, 2, time.Second, guarded))
	guard(t, ns, guarded)
	world.WaitRunning(t, node, 2)
	th := throttle(t, ns)

	steps := observe(t, node)
	rec := &recorder{}
	d := drain.New(drain.Options{Client: th.client, Pods: startPods(t, node), RetryInterval: 500 * time.Millisecond, Recorder: rec, Events: rec})
	start := time.Now()
	// The budget's pod is deleted at 30 s - margin - 2 s: long after the
	// throttling ends, and the trainer's 6 s grace fits after it.
	deadline := start.Add(30 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := d.Drain(testworld.Ctx(t, time.Minute), deadline, hostMaintenance)
		done <- err
	}()
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return rec.count(drain.OutcomeThrottled) >= 4, nil
	})
	if err != nil {
		t.Fatalf("the evictions were not throttled: outcomes %v", rec.outcomes)
	}
	pods, err := world.Client.CoreV1().Pods(ns).List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			t.Errorf("while throttled, %s is terminating; want every pod untouched", p.Name)
		}
	}
	if n := rec.count(drain.OutcomeEvicted) + rec.count(drain.OutcomeEscalated) + rec.count(drain.OutcomeBlocked); n != 0 {
		t.Errorf("outcomes %v while every eviction was throttled; want throttled alone", rec.outcomes)
	}
	if len(rec.events) != 0 {
		t.Errorf("events %v while throttled; want none (throttling is no budget's refusal)", rec.events)
	}

	th.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	term := map[string]step{}
	for _, s := range steps() {
		if s.kind == "terminating" {
			term[s.pod] = s
		}
	}
	if s, ok := term[ns+"/trainer"]; !ok || s.grace != 6 {
		t.Errorf("the trainer terminated as %+v; want evicted with its whole 6 s grace", s)
	}
	if rec.count(drain.OutcomeEvicted) != 1 || rec.count(drain.OutcomeBlocked) < 1 || rec.count(drain.OutcomeEscalated) != 1 {
		t.Errorf("outcomes %v; want the trainer evicted, the guarded pod blocked by its budget then deleted", rec.outcomes)
	}
	if want := []string{protocol.EventBlocked, protocol.EventEscalated}; !slices.Equal(rec.events, want) {
		t.Errorf("events %v; want %v, both of the guarded pod", rec.events, want)
	}
	for _, m := range rec.messages {
		if !strings.Contains(m, "guarded") {
			t.Errorf("event %q is not about the guarded pod", m)
		}
	}
}

// guard makes a PodDisruptionBudget that allows no disruption of the pods
// labels select, and waits until its status says so.
func guard(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	world.Budget(t, ns, "guard", labels, intstr.FromString("100%"), "1 healthy pod", func(b *policyv1.PodDisruptionBudget) bool { return b.Status.CurrentHealthy == 1 })
}

// throttled is a user the API server throttles until release.
type throttled struct {
	client  *kube.Client
	release func()
}

// throttle makes a service account of ns with every permission (not
// system:masters, whom Priority and Fairness exempts) and a flow schema
// that sends its evictions and its ConfigMap creations to a priority
// level of its own with no nominal seat, which runs one request at a time
// and rejects the others. One ConfigMap creation, held by a validating
// webhook the test serves, then occupies the level: every eviction is
// refused 429 until release ends the hold.
func throttle(t *testing.T, ns string) throttled {
	t.Helper()
	ctx := testworld.Ctx(t, time.Minute)
	admin := world.Client
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "drainer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "mh-test-" + ns
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "drainer"}},
	}
	level := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](0), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			}},
	}
	schema := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level.Name},
			MatchingPrecedence:         100,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: ns, Name: "drainer"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"create"}, APIGroups: []string{""},
					Resources: []string{"pods/eviction", "configmaps"}, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
			}},
		},
	}
	hold := holdingWebhook(t, ns, name)
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	level, err := admin.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, level, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.FlowcontrolV1().FlowSchemas().Create(ctx, schema, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.FlowcontrolV1().FlowSchemas().Delete(ctx, schema.Name, metav1.DeleteOptions{})
		_ = admin.FlowcontrolV1().PriorityLevelConfigurations().Delete(ctx, level.Name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	})
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "drainer", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := world.ConfigForToken(tr.Status.Token)
	waitClassified(t, cfg, ns, level.UID)

	// The hold: a ConfigMap creation the webhook keeps until release.
	user, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() {
		_, err := user.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hold"}}, metav1.CreateOptions{})
		created <- err
	}()
	select {
	case <-hold.arrived:
	case err := <-created:
		t.Fatalf("the holding request ended before the webhook held it: %v", err)
	case <-ctx.Done():
		t.Fatal("the holding request never reached the webhook")
	}
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			close(hold.release)
			if err := <-created; err != nil {
				t.Errorf("the holding request: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return throttled{client: c, release: release}
}

// waitClassified returns once the API server sends cfg's user's evictions
// to the priority level level: its flow control reads new flow schemas a
// moment after they are written, and names the level of each request in a
// response header.
func waitClassified(t *testing.T, cfg *rest.Config, ns string, level types.UID) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(&policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainer"}})
	url := cfg.Host + "/api/v1/namespaces/" + ns + "/pods/trainer/eviction?dryRun=All"
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID) == string(level), nil
	})
	if err != nil {
		t.Fatalf("the flow schema never classified the user's evictions: %v", err)
	}
}

// hold is a validating webhook's hold on requests: arrived is told of the
// first, and every request waits until release is closed.
type hold struct {
	arrived chan struct{}
	release chan struct{}
}

// holdingWebhook serves a validating webhook that holds the creation of
// ConfigMaps in ns (named name), allowing each once released or after
// 25 s (the API server waits at most 30 s).
func holdingWebhook(t *testing.T, ns, name string) hold {
	t.Helper()
	h := hold{arrived: make(chan struct{}), release: make(chan struct{})}
	var arrived sync.Once
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		arrived.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-time.After(25 * time.Second):
		case <-r.Context().Done():
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	url := srv.URL + "/hold"
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "hold.maintenance-handler.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          ptr.To[int32](30),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	ctx := testworld.Ctx(t, 10*time.Second)
	if _, err := world.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return h
}
