package kube

import (
	"context"
	"encoding/json"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// scheme knows the core, policy, resource (DRA), coordination and
// lifecycle (EvictionRequests) groups alone.
var (
	scheme = newScheme(corev1.AddToScheme, policyv1.AddToScheme, resourcev1.AddToScheme, coordinationv1.AddToScheme, lifecyclev1alpha1.AddToScheme)
	codecs = serializer.NewCodecFactory(scheme).WithoutConversion()
	params = runtime.NewParameterCodec(scheme)
)

func newScheme(adds ...func(*runtime.Scheme) error) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range adds {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kube: scheme: %v", err)) // a programming error, found at start-up
		}
	}
	return s
}

// Client makes the binaries' calls on the core, policy, resource,
// coordination and lifecycle groups.
type Client struct {
	core, policy, resource, coordination, lifecycle rest.Interface
	watches                                         WatchRecorder
}

// ReportWatches has the Informers of this Client's ListWatches tell r
// when their watch fails or turns healthy; call it before making them.
func (c *Client) ReportWatches(r WatchRecorder) { c.watches = r }

// New returns a Client for cfg. Its calls share one rate limit: cfg's
// RateLimiter, or else one of cfg's QPS and Burst.
func New(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps <= 0 {
			qps, burst = rest.DefaultQPS, rest.DefaultBurst
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	core, err := rest.RESTClientForConfigAndClient(groupConfig(cfg, corev1.SchemeGroupVersion, "/api"), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	policy, err := rest.RESTClientForConfigAndClient(groupConfig(cfg, policyv1.SchemeGroupVersion, "/apis"), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	resource, err := rest.RESTClientForConfigAndClient(groupConfig(cfg, resourcev1.SchemeGroupVersion, "/apis"), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	coordination, err := rest.RESTClientForConfigAndClient(groupConfig(cfg, coordinationv1.SchemeGroupVersion, "/apis"), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	lifecycle, err := rest.RESTClientForConfigAndClient(groupConfig(cfg, lifecyclev1alpha1.SchemeGroupVersion, "/apis"), hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{core: core, policy: policy, resource: resource, coordination: coordination, lifecycle: lifecycle}, nil
}

// groupConfig is a copy of cfg for the REST client of one group version
// (at apiPath, "/api" or "/apis"): it speaks protobuf, and JSON where the
// server cannot.
func groupConfig(cfg *rest.Config, gv schema.GroupVersion, apiPath string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, codecs
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

func (c *Client) nodes() *gentype.ClientWithList[*corev1.Node, *corev1.NodeList] {
	return gentype.NewClientWithList("nodes", c.core, params, "",
		func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

func (c *Client) pods(namespace string) *gentype.ClientWithList[*corev1.Pod, *corev1.PodList] {
	return gentype.NewClientWithList("pods", c.core, params, namespace,
		func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} })
}

func (c *Client) configMaps(namespace string) *gentype.ClientWithList[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return gentype.NewClientWithList("configmaps", c.core, params, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

func (c *Client) events(namespace string) *gentype.ClientWithList[*corev1.Event, *corev1.EventList] {
	return gentype.NewClientWithList("events", c.core, params, namespace,
		func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

func (c *Client) budgets(namespace string) *gentype.ClientWithList[*policyv1.PodDisruptionBudget, *policyv1.PodDisruptionBudgetList] {
	return gentype.NewClientWithList("poddisruptionbudgets", c.policy, params, namespace,
		func() *policyv1.PodDisruptionBudget { return &policyv1.PodDisruptionBudget{} },
		func() *policyv1.PodDisruptionBudgetList { return &policyv1.PodDisruptionBudgetList{} })
}

// GetResourceClaim reads a ResourceClaim (dynamic resource allocation).
func (c *Client) GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	return gentype.NewClientWithList("resourceclaims", c.resource, params, namespace,
		func() *resourcev1.ResourceClaim { return &resourcev1.ResourceClaim{} },
		func() *resourcev1.ResourceClaimList { return &resourcev1.ResourceClaimList{} }).Get(ctx, name, metav1.GetOptions{})
}

func (c *Client) evictionRequests(namespace string) *gentype.ClientWithList[*lifecyclev1alpha1.EvictionRequest, *lifecyclev1alpha1.EvictionRequestList] {
	return gentype.NewClientWithList("evictionrequests", c.lifecycle, params, namespace,
		func() *lifecyclev1alpha1.EvictionRequest { return &lifecyclev1alpha1.EvictionRequest{} },
		func() *lifecyclev1alpha1.EvictionRequestList { return &lifecyclev1alpha1.EvictionRequestList{} })
}

// RequestEviction writes requester's EvictionRequest name
// (lifecycle.k8s.io/v1alpha1) for pod p with the intent Eviction: created
// with p as its owner, so that the garbage collector removes it with the
// pod, or, where it is there already (withdrawn before), its intent set to
// Eviction again.
func (c *Client) RequestEviction(ctx context.Context, name string, p *corev1.Pod, requester string) error {
	req := &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}}},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{Target: lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: p.Name, UID: p.UID}},
			Requester: requester, Intent: lifecyclev1alpha1.EvictionRequestIntentEviction},
	}
	_, err := c.evictionRequests(p.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.setIntent(ctx, p.Namespace, name, lifecyclev1alpha1.EvictionRequestIntentEviction)
}

// WithdrawEviction sets the intent of the EvictionRequest name of namespace
// to Withdrawn; one that is not there is no error.
func (c *Client) WithdrawEviction(ctx context.Context, namespace, name string) error {
	if err := c.setIntent(ctx, namespace, name, lifecyclev1alpha1.EvictionRequestIntentWithdrawn); !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func (c *Client) setIntent(ctx context.Context, namespace, name string, intent lifecyclev1alpha1.EvictionRequestIntent) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"intent": intent}})
	_, err := c.evictionRequests(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Leases are the Leases of namespace.
func (c *Client) Leases(namespace string) *gentype.ClientWithList[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return gentype.NewClientWithList("leases", c.coordination, params, namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

// GetPod reads a pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// GetNode reads a Node.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return c.nodes().Get(ctx, name, metav1.GetOptions{})
}

// UpdateNode replaces a Node (conditional on its resourceVersion), as
// fieldManager.
func (c *Client) UpdateNode(ctx context.Context, n *corev1.Node, fieldManager string) (*corev1.Node, error) {
	return c.nodes().Update(ctx, n, metav1.UpdateOptions{FieldManager: fieldManager})
}

// ListNodes lists the Nodes that opts select.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return c.nodes().List(ctx, opts)
}

// WatchNodes watches the Nodes that opts select.
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.nodes().Watch(ctx, opts)
}

// PatchNode patches a Node, or its subresource ("status") when given, as
// fieldManager (empty: the default).
func (c *Client) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, fieldManager, subresource string) (*corev1.Node, error) {
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	return c.nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{FieldManager: fieldManager}, sub...)
}

// PatchNodeStatus patches a Node's status (a strategic merge patch: the
// conditions it names, by type).
func (c *Client) PatchNodeStatus(ctx context.Context, name string, data []byte) error {
	_, err := c.nodes().Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}

// PatchPod patches a pod, or its subresource ("status") when given.
func (c *Client) PatchPod(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, subresource string) error {
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	_, err := c.pods(namespace).Patch(ctx, name, pt, data, metav1.PatchOptions{}, sub...)
	return err
}

// GetConfigMap reads a ConfigMap.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return c.configMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// ListPods lists the pods of namespace (empty: every namespace) that opts
// select.
func (c *Client) ListPods(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.PodList, error) {
	return c.pods(namespace).List(ctx, opts)
}

// WatchPods watches the pods of namespace that opts select.
func (c *Client) WatchPods(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	return c.pods(namespace).Watch(ctx, opts)
}

// ListEvents lists the Events of namespace (empty: every namespace) that
// opts select.
func (c *Client) ListEvents(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.EventList, error) {
	return c.events(namespace).List(ctx, opts)
}

// ListBudgets lists the PodDisruptionBudgets of namespace (empty: every
// namespace).
func (c *Client) ListBudgets(ctx context.Context, namespace string) (*policyv1.PodDisruptionBudgetList, error) {
	return c.budgets(namespace).List(ctx, metav1.ListOptions{})
}

// Evict asks the Eviction API to evict a pod (PodDisruptionBudgets hold).
// client-go does not try it again after a 429 (a budget's refusal, or the
// API server's throttling): the drain paces its evictions itself, after
// the 429's Retry-After, within its deadline.
func (c *Client) Evict(ctx context.Context, e *policyv1.Eviction) error {
	return c.core.Post().Namespace(e.Namespace).Resource("pods").Name(e.Name).SubResource("eviction").
		MaxRetries(0).Body(e).Do(ctx).Error()
}

// DeletePod deletes a pod.
func (c *Client) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.pods(namespace).Delete(ctx, name, opts)
}

// NodeListWatch lists and watches the one Node named name.
func (c *Client) NodeListWatch(name string) ListWatch {
	return listWatchOf(c.watches, &corev1.Node{}, c.nodes(), fields.OneTermEqualSelector("metadata.name", name).String(), "")
}

// LabelledNodesListWatch lists and watches the Nodes whose label key has
// value.
func (c *Client) LabelledNodesListWatch(key, value string) ListWatch {
	return listWatchOf(c.watches, &corev1.Node{}, c.nodes(), "", labels.Set{key: value}.String())
}

// AllNodesListWatch lists and watches every Node.
func (c *Client) AllNodesListWatch() ListWatch {
	return listWatchOf(c.watches, &corev1.Node{}, c.nodes(), "", "")
}

// PodListWatch lists and watches the pods bound to the Node named node, in
// every namespace.
func (c *Client) PodListWatch(node string) ListWatch {
	return listWatchOf(c.watches, &corev1.Pod{}, c.pods(""), fields.OneTermEqualSelector("spec.nodeName", node).String(), "")
}

// ResourceSliceListWatch lists and watches the ResourceSlices of node's
// devices (resource.k8s.io/v1, spec.nodeName).
func (c *Client) ResourceSliceListWatch(node string) ListWatch {
	slices := gentype.NewClientWithList("resourceslices", c.resource, params, "",
		func() *resourcev1.ResourceSlice { return &resourcev1.ResourceSlice{} }, func() *resourcev1.ResourceSliceList { return &resourcev1.ResourceSliceList{} })
	return listWatchOf(c.watches, &resourcev1.ResourceSlice{}, slices, fields.OneTermEqualSelector("spec.nodeName", node).String(), "")
}

// DeviceTaintRules are the cluster's DeviceTaintRules (resource.k8s.io/v1).
func (c *Client) DeviceTaintRules() *gentype.ClientWithList[*resourcev1.DeviceTaintRule, *resourcev1.DeviceTaintRuleList] {
	return gentype.NewClientWithList("devicetaintrules", c.resource, params, "",
		func() *resourcev1.DeviceTaintRule { return &resourcev1.DeviceTaintRule{} }, func() *resourcev1.DeviceTaintRuleList { return &resourcev1.DeviceTaintRuleList{} })
}

// BudgetListWatch lists and watches the PodDisruptionBudgets of
// namespace (a drain follows those that refuse its evictions).
func (c *Client) BudgetListWatch(namespace string) ListWatch {
	return listWatchOf(c.watches, &policyv1.PodDisruptionBudget{}, c.budgets(namespace), "", "")
}

// ConfigMapListWatch lists and watches the one ConfigMap namespace/name.
func (c *Client) ConfigMapListWatch(namespace, name string) ListWatch {
	return listWatchOf(c.watches, &corev1.ConfigMap{}, c.configMaps(namespace), fields.OneTermEqualSelector("metadata.name", name).String(), "")
}

// lister is what a generic typed client of list type L does for a
// ListWatch.
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// listWatchOf lists and watches the objects (like example) of c that the
// selectors select.
func listWatchOf[L runtime.Object](r WatchRecorder, example runtime.Object, c lister[L], fieldSelector, labelSelector string) ListWatch {
	selected := func(opts metav1.ListOptions) metav1.ListOptions {
		opts.FieldSelector, opts.LabelSelector = fieldSelector, labelSelector
		return opts
	}
	return ListWatch{
		Object:   example,
		Recorder: r,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, selected(opts))
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, selected(opts))
		},
	}
}

// CreateEvent writes one Event now (a Recorder writes in the background).
func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	_, err := c.events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
	return err
}
