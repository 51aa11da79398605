package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/metrics"
)

func TestVerdict(t *testing.T) {
	on := func(node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{NodeName: node}}
	}
	for _, tc := range []struct {
		name, node string
		pod        *corev1.Pod
		ok         bool
		says       string
	}{
		{"its own node's pod", "a", on("a"), true, ""},
		{"another node's pod", "a", on("b"), false, "only the pods on its own Node (a), not ns/p on b"},
		{"a pod bound to no node", "a", on(""), false, "not ns/p, which is bound to no node"},
		{"a token that names no node", "", on(""), false, "its token names no node"},
		{"a token that names no node, a pod on a node", "", on("b"), false, "its token names no node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := admission.Verdict(tc.node, tc.pod)
			if ok != tc.ok || !strings.Contains(why, tc.says) {
				t.Errorf("Verdict(%q, pod on %q) = %t %q, want %t saying %q", tc.node, tc.pod.Spec.NodeName, ok, why, tc.ok, tc.says)
			}
		})
	}
}

// TestCheckAnswersReviews: the handler's answers, as the API server reads
// them, and the verdicts it counts.
func TestCheckAnswersReviews(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"ns/mine":  {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mine", UID: "uid-mine"}, Spec: corev1.PodSpec{NodeName: "a"}},
		"ns/other": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "uid-other"}, Spec: corev1.PodSpec{NodeName: "b"}},
	}
	get := func(_ context.Context, ns, name string) (*corev1.Pod, error) {
		if name == "broken" {
			return nil, apierrors.NewServiceUnavailable("etcd is away")
		}
		if p, ok := pods[ns+"/"+name]; ok {
			return p, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	m := metrics.NewEvictionCheck(prometheus.NewRegistry())
	srv := httptest.NewServer(&admission.Check{Pods: get, Metrics: m, Clock: clocktesting.NewFakeClock(testTime), Logger: slog.New(slog.DiscardHandler)})
	defer srv.Close()
	// review has the check review node's eviction of pod name, whose
	// precondition names the pod's UID uid ("": none).
	review := func(node, name, sub, uid string) *admissionv1.AdmissionResponse {
		t.Helper()
		eviction := policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		if uid != "" {
			u := types.UID(uid)
			eviction.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u}}
		}
		obj, _ := json.Marshal(eviction)
		req := &admissionv1.AdmissionRequest{UID: types.UID("u-" + name), Name: name, Namespace: "ns", SubResource: sub,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Operation: admissionv1.Create,
			UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:mh:maintenance-handler-agent"}, Object: runtime.RawExtension{Raw: obj}}
		if node != "" {
			req.UserInfo.Extra = map[string]authnv1.ExtraValue{admission.NodeNameExtra: {node}}
		}
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
			t.Fatalf("answer to %s: %v", name, err)
		}
		if out.Response.UID != req.UID || out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
			t.Errorf("answer to %s: uid %q, %s %s", name, out.Response.UID, out.APIVersion, out.Kind)
		}
		return out.Response
	}
	for _, tc := range []struct {
		name, node, pod, sub, uid string
		allowed                   bool
		code                      int32
		says                      string
	}{
		{"its own node's pod", "a", "mine", "eviction", "uid-mine", true, 0, ""},
		{"another node's pod", "a", "other", "eviction", "uid-other", false, http.StatusForbidden, "only the pods on its own Node (a), not ns/other on b"},
		{"a token without a node", "", "mine", "eviction", "uid-mine", false, http.StatusForbidden, "its token names no node"},
		{"a pod that is gone (a pod of its name may be created before the eviction reads it)", "a", "gone", "eviction", "uid-gone", false, http.StatusNotFound, "not found"},
		{"a pod it cannot read", "a", "broken", "eviction", "uid-broken", false, http.StatusServiceUnavailable, "could not read pod ns/broken"},
		{"not an eviction", "a", "mine", "", "uid-mine", false, http.StatusBadRequest, "pod evictions and EvictionRequests only"},
		// The API server evicts the pod of that name it finds after the
		// check: only the UID checked keeps another pod of the name, on
		// another node, from being evicted.
		{"its own node's pod, with no UID", "a", "mine", "eviction", "", false, http.StatusUnprocessableEntity, "must name the pod's UID (deleteOptions.preconditions.uid)"},
		{"a pod of that name, another UID", "a", "mine", "eviction", "uid-old", false, http.StatusNotFound, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := review(tc.node, tc.pod, tc.sub, tc.uid)
			if r.Allowed != tc.allowed {
				t.Errorf("allowed %t, want %t (%+v)", r.Allowed, tc.allowed, r.Result)
			}
			if !tc.allowed && (r.Result == nil || r.Result.Code != tc.code || !strings.Contains(r.Result.Message, tc.says)) {
				t.Errorf("result %+v, want code %d saying %q", r.Result, tc.code, tc.says)
			}
		})
	}
	for verdict, want := range map[string]float64{admission.Allowed: 1, admission.Refused: 6, admission.Failed: 1} {
		if got := testutil.ToFloat64(m.Checks.WithLabelValues(verdict)); got != want {
			t.Errorf("eviction_checks_total{verdict=%q} = %v, want %v", verdict, got, want)
		}
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is no review: %d, want 400", resp.StatusCode)
	}
}

// TestCheckAnswersEvictionRequests: an EvictionRequest the agent writes is
// checked as its eviction would be, for the pod it names by name and UID; a
// withdrawal is never held back.
func TestCheckAnswersEvictionRequests(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"mine":  {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "mine", UID: "uid-mine"}, Spec: corev1.PodSpec{NodeName: "a"}},
		"other": {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "uid-other"}, Spec: corev1.PodSpec{NodeName: "b"}},
	}
	get := func(_ context.Context, _, name string) (*corev1.Pod, error) {
		if p, ok := pods[name]; ok {
			return p, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	check := &admission.Check{Pods: get, Metrics: metrics.NewEvictionCheck(prometheus.NewRegistry()), Clock: clocktesting.NewFakeClock(testTime), Logger: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name, pod, uid string
		intent         lifecyclev1alpha1.EvictionRequestIntent
		allowed        bool
		says           string
	}{
		{"its own node's pod", "mine", "uid-mine", lifecyclev1alpha1.EvictionRequestIntentEviction, true, ""},
		{"another node's pod", "other", "uid-other", lifecyclev1alpha1.EvictionRequestIntentEviction, false, "not ns/other on b"},
		{"a pod of that name, another UID", "mine", "uid-old", lifecyclev1alpha1.EvictionRequestIntentEviction, false, "not found"},
		{"a withdrawal, whatever the pod", "other", "uid-other", lifecyclev1alpha1.EvictionRequestIntentWithdrawn, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, _ := json.Marshal(lifecyclev1alpha1.EvictionRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"},
				Spec: lifecyclev1alpha1.EvictionRequestSpec{Target: lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: tc.pod, UID: types.UID(tc.uid)}},
					Requester: "maintenance-handler.io/agent", Intent: tc.intent}})
			req := &admissionv1.AdmissionRequest{UID: "u", Name: "r", Namespace: "ns", Operation: admissionv1.Create,
				Resource: metav1.GroupVersionResource{Group: "lifecycle.k8s.io", Version: "v1alpha1", Resource: "evictionrequests"},
				UserInfo: authnv1.UserInfo{Extra: map[string]authnv1.ExtraValue{admission.NodeNameExtra: {"a"}}}, Object: runtime.RawExtension{Raw: obj}}
			body, _ := json.Marshal(admissionv1.AdmissionReview{Request: req})
			rec := httptest.NewRecorder()
			check.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/evictions", bytes.NewReader(body)))
			var out admissionv1.AdmissionReview
			if err := json.NewDecoder(rec.Body).Decode(&out); err != nil || out.Response == nil {
				t.Fatalf("answer: %v", err)
			}
			r := out.Response
			if r.Allowed != tc.allowed || !tc.allowed && (r.Result == nil || !strings.Contains(r.Result.Message, tc.says)) {
				t.Errorf("allowed %t (%+v), want %t saying %q", r.Allowed, r.Result, tc.allowed, tc.says)
			}
		})
	}
}
