package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
)

// codecs know the core (v1) and policy (v1) types, and no other group.
var codecs = Codecs(corev1.AddToScheme, policyv1.AddToScheme)

// Codecs is the serializer of a scheme of the groups adds register (each
// registers metav1's options and Status for its group version too), and
// of no other group; it panics if one cannot register (a programming
// error, found at start-up).
func Codecs(adds ...func(*runtime.Scheme) error) runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	for _, add := range adds {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kube: scheme: %v", err))
		}
	}
	return serializer.NewCodecFactory(s).WithoutConversion()
}

// Client makes the binaries' calls on the core and policy groups.
type Client struct {
	core   rest.Interface // /api/v1
	policy rest.Interface // /apis/policy/v1
}

// New returns a Client for cfg (its QPS and Burst bound every call).
func New(cfg *rest.Config) (*Client, error) {
	// Protobuf, as the kubelet speaks: a host of a 64-host slice decodes
	// every write to each of the 64 Nodes it watches.
	c := GroupConfig(cfg, corev1.SchemeGroupVersion, "/api", codecs)
	core, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	// The same limits and transport for the budgets' group.
	pc := rest.CopyConfig(c)
	pc.GroupVersion, pc.APIPath = &policyv1.SchemeGroupVersion, "/apis"
	policy, err := rest.RESTClientForConfigAndClient(pc, core.Client)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{core: core, policy: policy}, nil
}

// GroupConfig is a copy of cfg for the REST client of one group version
// (at apiPath, "/api" or "/apis"), whose types s knows: it speaks
// protobuf, JSON where the server cannot, and its calls are bound by cfg's
// rate limiter or else by one of cfg's QPS and Burst.
func GroupConfig(cfg *rest.Config, gv schema.GroupVersion, apiPath string, s runtime.NegotiatedSerializer) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, s
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	return c
}

// GetNode reads a Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	return n, c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(n)
}

// UpdateNode replaces a Node (conditional on its resourceVersion), as
// fieldManager.
func (c *Client) UpdateNode(ctx context.Context, n *corev1.Node, fieldManager string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.core.Put().Resource("nodes").Name(n.Name).
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(n).Do(ctx).Into(out)
	return out, err
}

// ListNodes lists the Nodes that opts select.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	return out, c.core.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
}

// WatchNodes watches the Nodes that opts select.
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().Resource("nodes").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// PatchNode patches a Node, or its subresource ("status") when given, as
// fieldManager (empty: the default).
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager, subresource string) (*corev1.Node, error) {
	out := &corev1.Node{}
	req := c.core.Patch(pt).Resource("nodes").Name(name).VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, metav1.ParameterCodec)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	return out, req.Body(data).Do(ctx).Into(out)
}

// AllNodesListWatch lists and watches every Node.
func (c *Client) AllNodesListWatch() cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "nodes", metav1.NamespaceAll, fields.Everything())
}

// NodeListWatch lists and watches the one Node named name.
func (c *Client) NodeListWatch(name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", name))
}

// LabelledNodesListWatch lists and watches the Nodes whose label key has
// value.
func (c *Client) LabelledNodesListWatch(key, value string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(c.core, "nodes", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{key: value}.String()
	})
}

// BudgetListWatch lists and watches the PodDisruptionBudgets of
// namespace (a drain follows those that refuse its evictions).
func (c *Client) BudgetListWatch(namespace string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.policy, "poddisruptionbudgets", namespace, fields.Everything())
}

// PodListWatch lists and watches the pods bound to the Node named node, in
// every namespace.
func (c *Client) PodListWatch(node string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}

// PatchNodeStatus patches a Node's status (a strategic merge patch: the
// conditions it names, by type).
func (c *Client) PatchNodeStatus(ctx context.Context, name string, data []byte) error {
	return c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(name).SubResource("status").Body(data).Do(ctx).Error()
}

// PatchPod patches a pod, or its subresource ("status") when given.
func (c *Client) PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource string) error {
	req := c.core.Patch(pt).Namespace(namespace).Resource("pods").Name(name)
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	return req.Body(data).Do(ctx).Error()
}

// ConfigMapListWatch lists and watches the one ConfigMap namespace/name.
func (c *Client) ConfigMapListWatch(namespace, name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.core, "configmaps", namespace, fields.OneTermEqualSelector("metadata.name", name))
}

// GetConfigMap reads a ConfigMap.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	return out, c.core.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(out)
}

// ListPods lists the pods of namespace (empty: every namespace) that opts
// select.
func (c *Client) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	return out, c.core.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
}

// WatchPods watches the pods of namespace that opts select.
func (c *Client) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().Namespace(namespace).Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// ListEvents lists the Events of namespace (empty: every namespace) that
// opts select.
func (c *Client) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	out := &corev1.EventList{}
	return out, c.core.Get().Namespace(namespace).Resource("events").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
}

// ListBudgets lists the PodDisruptionBudgets of namespace (empty: every
// namespace).
func (c *Client) ListBudgets(ctx context.Context, namespace string) (*policyv1.PodDisruptionBudgetList, error) {
	out := &policyv1.PodDisruptionBudgetList{}
	return out, c.policy.Get().Namespace(namespace).Resource("poddisruptionbudgets").Do(ctx).Into(out)
}

// Evict asks the Eviction API to evict a pod (PodDisruptionBudgets hold).
func (c *Client) Evict(ctx context.Context, e *policyv1.Eviction) error {
	return c.core.Post().Namespace(e.Namespace).Resource("pods").Name(e.Name).SubResource("eviction").Body(e).Do(ctx).Error()
}

// DeletePod deletes a pod.
func (c *Client) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.core.Delete().Namespace(namespace).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

// CreateEvent creates an Event (EventWriter).
func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	return c.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

// PatchEvent merge-patches an Event (EventWriter).
func (c *Client) PatchEvent(ctx context.Context, namespace, name string, mergePatch []byte) error {
	return c.core.Patch(types.MergePatchType).Namespace(namespace).Resource("events").Name(name).Body(mergePatch).Do(ctx).Error()
}
