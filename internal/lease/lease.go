package lease

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/internal/kuberest"
)

// codecs know coordination.k8s.io/v1 alone.
var codecs = kuberest.Codecs(coordinationv1.AddToScheme)

// Client reads and writes Leases.
type Client struct {
	rest rest.Interface
}

// New returns a Client for cfg (its QPS and Burst bound every call; a
// RateLimiter set in cfg is shared with whoever else uses it).
func New(cfg *rest.Config) (*Client, error) {
	r, err := rest.RESTClientFor(kuberest.GroupConfig(cfg, coordinationv1.SchemeGroupVersion, "/apis", codecs))
	if err != nil {
		return nil, fmt.Errorf("lease client: %w", err)
	}
	return &Client{rest: r}, nil
}

// Get reads the Lease namespace/name.
func (c *Client) Get(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, c.rest.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(out)
}

// Create creates l, as fieldManager.
func (c *Client) Create(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.rest.Post().Namespace(l.Namespace).Resource("leases").
		VersionedParams(&metav1.CreateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

// Update replaces l (conditional on its resourceVersion when set), as
// fieldManager.
func (c *Client) Update(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := c.rest.Put().Namespace(l.Namespace).Resource("leases").Name(l.Name).
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, metav1.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the Lease namespace/name.
func (c *Client) Delete(ctx context.Context, namespace, name string) error {
	return c.rest.Delete().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Error()
}
