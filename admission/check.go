package admission

// The check itself: one eviction (or EvictionRequest), one pod read, one
// verdict.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/metrics"
)

// Path is where the check is served.
const Path = "/evictions"

// NodeNameExtra is the user info a token bound to a pod carries: the name
// of the Node the pod runs on.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// maxReview bounds an AdmissionReview's body (an Eviction is a few hundred
// bytes).
const maxReview = 1 << 20

// Verdicts, as the metric counts them.
const (
	Allowed = "allowed"
	Refused = "refused"
	Failed  = "error" // the pod could not be read: refused, and retried by the agent
)

// PodGetter reads one pod.
type PodGetter func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// Verdict is whether a caller whose token names node may evict pod, and,
// when not, why.
func Verdict(node string, pod *corev1.Pod) (bool, string) {
	switch {
	case node == "":
		return false, fmt.Sprintf("the maintenance-handler agent may evict only the pods on its own Node, and its token names no node (a token bound to the agent's pod names it); refused the eviction of %s/%s", pod.Namespace, pod.Name)
	case pod.Spec.NodeName == node:
		return true, ""
	case pod.Spec.NodeName == "":
		return false, fmt.Sprintf("the maintenance-handler agent may evict only the pods on its own Node (%s), not %s/%s, which is bound to no node", node, pod.Namespace, pod.Name)
	}
	return false, fmt.Sprintf("the maintenance-handler agent may evict only the pods on its own Node (%s), not %s/%s on %s", node, pod.Namespace, pod.Name, pod.Spec.NodeName)
}

// Check is the webhook's handler: it answers AdmissionReviews of pod
// evictions.
type Check struct {
	// Pods reads the pod an eviction names.
	Pods PodGetter
	// Metrics counts the verdicts and their time.
	Metrics *metrics.EvictionCheck
	// Sources, when set, holds each source to its budget of refused
	// reviews, checked before a pod is read.
	Sources *Sources
	// Nodes, when set, remembers the pods read, so that a review asked
	// again of one costs no read.
	Nodes  *PodNodes
	Clock  clock.PassiveClock
	Logger *slog.Logger
}

// ServeHTTP answers one AdmissionReview. A request it cannot read is a
// 400; every review it can read gets a review back, allowed or not.
func (c *Check) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, maxReview)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("want an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	start := c.Clock.Now()
	resp, verdict := c.review(r.Context(), r.RemoteAddr, review.Request)
	c.Metrics.Observe(verdict, c.Clock.Since(start))
	resp.UID = review.Request.UID
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
}

// readTimeout bounds the pod's read: the API server waits for the check
// at most the configuration's timeoutSeconds (5).
const readTimeout = 4 * time.Second

func (c *Check) review(ctx context.Context, remoteAddr string, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	name, uid := req.Name, types.UID("")
	switch {
	case req.Resource.Resource == "pods" && req.SubResource == "eviction":
		var err error
		if uid, err = evictionUID(req); err != nil {
			return refuse(http.StatusUnprocessableEntity, err.Error()), Refused
		}
	case req.Resource.Group == lifecyclev1alpha1.GroupName && req.Resource.Resource == "evictionrequests" && req.SubResource == "":
		target, withdrawn, err := requestTarget(req)
		switch {
		case err != nil:
			return refuse(http.StatusBadRequest, err.Error()), Refused
		case withdrawn:
			// A withdrawal asks for nothing: it is never held back.
			return &admissionv1.AdmissionResponse{Allowed: true}, Allowed
		}
		name, uid = target.Name, target.UID
	default:
		return refuse(http.StatusBadRequest, fmt.Sprintf("the eviction check reviews pod evictions and EvictionRequests only, not %s/%s", req.Resource.Resource, req.SubResource)), Refused
	}
	node := ""
	if v := req.UserInfo.Extra[NodeNameExtra]; len(v) > 0 {
		node = v[0]
	}
	source := ""
	if c.Sources != nil {
		source = c.Sources.Of(remoteAddr)
	}
	pod, resp, verdict := c.read(ctx, source, node, req.Namespace, name, uid)
	if pod == nil {
		return resp, verdict
	}
	ok, why := Verdict(node, pod)
	if ok {
		return &admissionv1.AdmissionResponse{Allowed: true}, Allowed
	}
	c.refused(source, node)
	c.Logger.Warn("eviction refused: the pod is not on the caller's node", "user", req.UserInfo.Username, "node", node,
		"pod", req.Namespace+"/"+name, "podNode", pod.Spec.NodeName)
	return refuse(http.StatusForbidden, why), Refused
}

// read is the pod a review names, from what the check remembers of it or
// read from the API server; or, where there is none or it is not read, the
// review's answer.
func (c *Check) read(ctx context.Context, source, node, namespace, name string, uid types.UID) (*corev1.Pod, *admissionv1.AdmissionResponse, string) {
	if c.Nodes != nil && uid != "" {
		if on, ok := c.Nodes.Get(namespace, name, uid); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid}, Spec: corev1.PodSpec{NodeName: on}}, nil, ""
		}
	}
	if c.Sources != nil && c.Sources.Spent(source, node) {
		c.Metrics.CallerRefused(CallerOverBudget)
		return nil, refuse(http.StatusTooManyRequests, fmt.Sprintf("the eviction check refused too many reviews from %s of late (no such pod, or not on the node named): pod %s/%s is not read, try later", source, namespace, name)), Refused
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	pod, err := c.Pods(ctx, namespace, name)
	switch {
	case apierrors.IsNotFound(err) || err == nil && uid != "" && pod.UID != uid:
		// No such pod: refused as the eviction would be (404), never
		// allowed. The API server reads the pod after the check: a pod of
		// the same name created in between may be on another node, so an
		// eviction (by its precondition) and an EvictionRequest name the
		// pod's UID, and the API server evicts only the pod checked.
		c.refused(source, node)
		return nil, refuse(http.StatusNotFound, fmt.Sprintf("pod %s/%s not found", namespace, name)), Refused
	case err != nil:
		c.Logger.Warn("eviction check could not read the pod", "pod", namespace+"/"+name, "err", err)
		return nil, refuse(http.StatusServiceUnavailable, fmt.Sprintf("the eviction check could not read pod %s/%s: %v", namespace, name, err)), Failed
	}
	if c.Nodes != nil && uid != "" {
		c.Nodes.Put(namespace, name, uid, pod.Spec.NodeName)
	}
	return pod, nil, ""
}

// refused takes one refusal from the budgets of source's reviews whose
// token names node.
func (c *Check) refused(source, node string) {
	if c.Sources != nil {
		c.Sources.Refused(source, node)
	}
}

// evictionUID is the pod's UID the Eviction under review names in its
// precondition (deleteOptions.preconditions.uid), which the agent always
// sets: without it the API server would evict whatever pod has the name
// when it gets there, which may be another pod, on another node, than the
// one checked.
func evictionUID(req *admissionv1.AdmissionRequest) (types.UID, error) {
	var e policyv1.Eviction
	if err := json.Unmarshal(req.Object.Raw, &e); err != nil {
		return "", fmt.Errorf("the Eviction of pod %s/%s under review cannot be read: %v", req.Namespace, req.Name, err)
	}
	if e.DeleteOptions == nil || e.DeleteOptions.Preconditions == nil || e.DeleteOptions.Preconditions.UID == nil || *e.DeleteOptions.Preconditions.UID == "" {
		return "", fmt.Errorf("the maintenance-handler agent's eviction of pod %s/%s must name the pod's UID (deleteOptions.preconditions.uid), so that no other pod of its name is evicted", req.Namespace, req.Name)
	}
	return *e.DeleteOptions.Preconditions.UID, nil
}

// requestTarget is the pod an EvictionRequest under review names, and
// whether it withdraws its intent.
func requestTarget(req *admissionv1.AdmissionRequest) (*lifecyclev1alpha1.EvictionRequestPodReference, bool, error) {
	var r lifecyclev1alpha1.EvictionRequest
	if err := json.Unmarshal(req.Object.Raw, &r); err != nil {
		return nil, false, fmt.Errorf("the EvictionRequest under review cannot be read: %v", err)
	}
	if r.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentWithdrawn {
		return nil, true, nil
	}
	if r.Spec.Target.Pod == nil {
		return nil, false, fmt.Errorf("the EvictionRequest %s/%s names no pod", req.Namespace, req.Name)
	}
	return r.Spec.Target.Pod, false, nil
}

func refuse(code int32, msg string) *admissionv1.AdmissionResponse {
	reason := metav1.StatusReasonForbidden
	switch code {
	case http.StatusServiceUnavailable:
		reason = metav1.StatusReasonServiceUnavailable
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusUnprocessableEntity:
		reason = metav1.StatusReasonInvalid
	case http.StatusTooManyRequests:
		reason = metav1.StatusReasonTooManyRequests
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}
