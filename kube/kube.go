package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Waiter bounds the rate of requests: Wait returns when the next may go
// (client-go's flowcontrol.RateLimiter is one).
type Waiter interface {
	Wait(ctx context.Context) error
}

// Client makes the binaries' calls on the core and policy groups, in JSON.
type Client struct {
	host      *url.URL
	http      *http.Client
	userAgent string
	limiter   Waiter
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("kubernetes client: the API server %q is not a URL", cfg.Host)
	}
	if cfg.HTTPClient == nil {
		return nil, errors.New("kubernetes client: no HTTP client")
	}
	c := &Client{host: u, http: cfg.HTTPClient, userAgent: cfg.UserAgent, limiter: cfg.Limiter}
	if c.limiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps <= 0 {
			qps, burst = 5, 10
		}
		c.limiter = rate.NewLimiter(rate.Limit(qps), max(burst, 1))
	}
	if c.userAgent == "" {
		c.userAgent = "maintenance-handler"
	}
	return c, nil
}

// The groups' resources the calls name.
var (
	nodes       = resource{group: corev1.SchemeGroupVersion, name: "nodes"}
	pods        = resource{group: corev1.SchemeGroupVersion, name: "pods"}
	configMaps  = resource{group: corev1.SchemeGroupVersion, name: "configmaps"}
	events      = resource{group: corev1.SchemeGroupVersion, name: "events"}
	budgetsKind = resource{group: policyv1.SchemeGroupVersion, name: "poddisruptionbudgets"}
)

// resource is a resource of one group version.
type resource struct {
	group schema.GroupVersion
	name  string
}

// request is one call: a resource's object (or collection: name ""), or
// its subresource.
type request struct {
	method      string
	res         resource
	namespace   string
	name        string
	subresource string
	options     runtime.Object // ListOptions, UpdateOptions, ...: the query
	contentType string         // of body; JSON by default
	body        any            // []byte as it is, anything else in JSON
}

// path is the request's URL path under the API server's.
func (r request) path() string {
	var b strings.Builder
	if r.res.group.Group == "" {
		b.WriteString("/api/")
	} else {
		b.WriteString("/apis/" + r.res.group.Group + "/")
	}
	b.WriteString(r.res.group.Version)
	if r.namespace != "" {
		b.WriteString("/namespaces/" + url.PathEscape(r.namespace))
	}
	b.WriteString("/" + r.res.name)
	if r.name != "" {
		b.WriteString("/" + url.PathEscape(r.name))
	}
	if r.subresource != "" {
		b.WriteString("/" + r.subresource)
	}
	return b.String()
}

// maxErrorBody bounds what is read of an error's body.
const maxErrorBody = 1 << 20

// send makes the request and returns its response when it succeeded (a
// 2xx); otherwise an *apierrors.StatusError as client-go gives it.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		b, ok := r.body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(r.body); err != nil {
				return nil, fmt.Errorf("encode %s: %w", r.res.name, err)
			}
		}
		body = bytes.NewReader(b)
	}
	u := *c.host
	u.Path = strings.TrimSuffix(u.Path, "/") + r.path()
	if r.options != nil {
		q, err := metav1.ParameterCodec.EncodeParameters(r.options, metav1.SchemeGroupVersion)
		if err != nil {
			return nil, fmt.Errorf("encode %T: %w", r.options, err)
		}
		u.RawQuery = q.Encode()
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return nil, statusError(resp, r, raw)
}

// statusError is the API server's answer as an error: the Status it sent,
// or one made of the HTTP status as client-go makes it.
func statusError(resp *http.Response, r request, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Status == metav1.StatusFailure {
		if st.Code == 0 {
			st.Code = int32(resp.StatusCode)
		}
		if st.Message == "" {
			st.Message = fmt.Sprintf("%s %s: %s (%s)", r.method, r.path(), http.StatusText(resp.StatusCode), st.Reason)
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return apierrors.NewGenericServerResponse(resp.StatusCode, r.method,
		schema.GroupResource{Group: r.res.group.Group, Resource: r.res.name}, r.name, string(body), retryAfter, true)
}

// do makes the request and decodes its answer into out (nil: drops it).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", r.method, r.path(), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // what follows the value, so that the connection is reused
	return nil
}

// GetNode reads a Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.do(ctx, request{method: http.MethodGet, res: nodes, name: name}, out)
}

// UpdateNode replaces a Node (conditional on its resourceVersion), as
// fieldManager.
func (c *Client) UpdateNode(ctx context.Context, n *corev1.Node, fieldManager string) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.do(ctx, request{method: http.MethodPut, res: nodes, name: n.Name,
		options: &metav1.UpdateOptions{FieldManager: fieldManager}, body: n}, out)
}

// ListNodes lists the Nodes that opts select.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	return out, c.do(ctx, request{method: http.MethodGet, res: nodes, options: &opts}, out)
}

// WatchNodes watches the Nodes that opts select.
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return watchOf[corev1.Node](ctx, c, nodes, "", opts)
}

// PatchNode patches a Node, or its subresource ("status") when given, as
// fieldManager (empty: the default).
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager, subresource string) (*corev1.Node, error) {
	out := &corev1.Node{}
	return out, c.do(ctx, request{method: http.MethodPatch, res: nodes, name: name, subresource: subresource,
		options: &metav1.PatchOptions{FieldManager: fieldManager}, contentType: string(pt), body: data}, out)
}

// NodeListWatch lists and watches the one Node named name.
func (c *Client) NodeListWatch(name string) ListWatch {
	return listWatchOf[corev1.Node](c, nodes, "", fields.OneTermEqualSelector("metadata.name", name).String(), "")
}

// LabelledNodesListWatch lists and watches the Nodes whose label key has
// value.
func (c *Client) LabelledNodesListWatch(key, value string) ListWatch {
	return listWatchOf[corev1.Node](c, nodes, "", "", labels.Set{key: value}.String())
}

// BudgetListWatch lists and watches the PodDisruptionBudgets of
// namespace (a drain follows those that refuse its evictions).
func (c *Client) BudgetListWatch(namespace string) ListWatch {
	return listWatchOf[policyv1.PodDisruptionBudget](c, budgetsKind, namespace, "", "")
}

// PodListWatch lists and watches the pods bound to the Node named node, in
// every namespace.
func (c *Client) PodListWatch(node string) ListWatch {
	return listWatchOf[corev1.Pod](c, pods, "", fields.OneTermEqualSelector("spec.nodeName", node).String(), "")
}

// PatchNodeStatus patches a Node's status (a strategic merge patch: the
// conditions it names, by type).
func (c *Client) PatchNodeStatus(ctx context.Context, name string, data []byte) error {
	return c.do(ctx, request{method: http.MethodPatch, res: nodes, name: name, subresource: "status",
		contentType: string(types.StrategicMergePatchType), body: data}, nil)
}

// PatchPod patches a pod, or its subresource ("status") when given.
func (c *Client) PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource string) error {
	return c.do(ctx, request{method: http.MethodPatch, res: pods, namespace: namespace, name: name, subresource: subresource,
		contentType: string(pt), body: data}, nil)
}

// ConfigMapListWatch lists and watches the one ConfigMap namespace/name.
func (c *Client) ConfigMapListWatch(namespace, name string) ListWatch {
	return listWatchOf[corev1.ConfigMap](c, configMaps, namespace, fields.OneTermEqualSelector("metadata.name", name).String(), "")
}

// GetConfigMap reads a ConfigMap.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	return out, c.do(ctx, request{method: http.MethodGet, res: configMaps, namespace: namespace, name: name}, out)
}

// ListPods lists the pods of namespace (empty: every namespace) that opts
// select.
func (c *Client) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	return out, c.do(ctx, request{method: http.MethodGet, res: pods, namespace: namespace, options: &opts}, out)
}

// WatchPods watches the pods of namespace that opts select.
func (c *Client) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return watchOf[corev1.Pod](ctx, c, pods, namespace, opts)
}

// ListEvents lists the Events of namespace (empty: every namespace) that
// opts select.
func (c *Client) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	return out, c.do(ctx, request{method: http.MethodGet, res: events, namespace: namespace, options: &opts}, out)
}

// ListBudgets lists the PodDisruptionBudgets of namespace (empty: every
// namespace).
func (c *Client) ListBudgets(ctx context.Context, namespace string) (*policyv1.PodDisruptionBudgetList, error) {
	out := &policyv1.PodDisruptionBudgetList{}
	return out, c.do(ctx, request{method: http.MethodGet, res: budgetsKind, namespace: namespace}, out)
}

// Evict asks the Eviction API to evict a pod (PodDisruptionBudgets hold).
// The API server takes a body's missing apiVersion and kind from the
// endpoint, here and in DeletePod.
func (c *Client) Evict(ctx context.Context, e *policyv1.Eviction) error {
	return c.do(ctx, request{method: http.MethodPost, res: pods, namespace: e.Namespace, name: e.Name, subresource: "eviction", body: e}, nil)
}

// DeletePod deletes a pod.
func (c *Client) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.do(ctx, request{method: http.MethodDelete, res: pods, namespace: namespace, name: name, body: &opts}, nil)
}

// CreateEvent creates an Event (EventWriter).
func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	return c.do(ctx, request{method: http.MethodPost, res: events, namespace: e.Namespace, body: e}, nil)
}

// PatchEvent merge-patches an Event (EventWriter).
func (c *Client) PatchEvent(ctx context.Context, namespace, name string, mergePatch []byte) error {
	return c.do(ctx, request{method: http.MethodPatch, res: events, namespace: namespace, name: name,
		contentType: string(types.MergePatchType), body: mergePatch}, nil)
}
