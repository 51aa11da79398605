package manifests_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestEvictionCheckAnswersTheAPIServerOnly: with the check's callers set
// to the user the API server presents to webhooks (the world's API server
// presents a token, as a self-managed cluster's admission configuration
// can make it), and the aggregator's ClusterRole as the chart renders it
// for that value, an agent's eviction through the API server is reviewed
// and allowed. A pod that calls the check itself, with no token or with
// its own service account's (the agent's), is turned away before any pod
// is read, and counted.
func TestEvictionCheckAnswersTheAPIServerOnly(t *testing.T) {
	testworld.Need(t)
	const node = "callers-gpu"
	agent := shippedForCallers(t, node)
	m, addr := hostEvictionCheckFor(t, testworld.ShippedNamespace, []string{testworld.WebhookCaller})

	token := agentToken(t, agent).Status.Token
	as, err := kubernetes.NewForConfig(world.ConfigForToken(token))
	if err != nil {
		t.Fatal(err)
	}
	podOn(t, "default", "callers-victim", node)
	podOn(t, "default", "callers-elsewhere", "callers-other")
	if err := evictWhenServed(t, as, "default", "callers-victim"); err != nil {
		t.Fatalf("the agent's eviction of a pod on its own node, through the API server: %v", err)
	}
	reviewed := func() []float64 {
		return []float64{testutil.ToFloat64(m.Checks.WithLabelValues(admission.Allowed)), testutil.ToFloat64(m.Checks.WithLabelValues(admission.Refused)), testutil.ToFloat64(m.Checks.WithLabelValues(admission.Failed))}
	}
	before := reviewed()
	if before[0] != 1 {
		t.Errorf("reviews (allowed, refused, error) %v after the agent's eviction, want 1 allowed", before)
	}

	// A pod calls the check itself: a review of an eviction elsewhere, as
	// if the agent had asked.
	review, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "forged", Namespace: "default", Name: "callers-elsewhere",
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: "eviction", Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:" + testworld.ShippedAgentNamespace + ":maintenance-handler-agent",
				Extra: map[string]authnv1.ExtraValue{admission.NodeNameExtra: {"callers-other"}}}},
	})
	// The pod reaches the check's port, but cannot know its CA.
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the caller, not the server, is under test
	post := func(bearer string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+admission.Path, bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := direct.Do(req)
		if err != nil {
			t.Fatalf("calling the check: %v", err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("a call with no token: %d, want 401", code)
	}
	if code := post(token); code != http.StatusForbidden {
		t.Errorf("a call with the agent's own token: %d, want 403", code)
	}
	refused := func(reason string) float64 { return testutil.ToFloat64(m.CallersRefused.WithLabelValues(reason)) }
	if got := []float64{refused(admission.CallerNoToken), refused(admission.CallerNotAllowed)}; got[0] != 1 || got[1] != 1 {
		t.Errorf("callers refused (no-token, not-allowed) %v, want 1 and 1", got)
	}
	if after := reviewed(); after[0] != before[0] || after[1] != before[1] || after[2] != before[2] {
		t.Errorf("reviews (allowed, refused, error) %v after the direct calls, want %v: a caller turned away reads no pod", after, before)
	}
}
