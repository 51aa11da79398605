package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Object is a Kubernetes object, as an Informer keeps it.
type Object interface {
	metav1.Object
	runtime.Object
}

// ListWatch lists and watches one set of objects (the options' selectors
// are its own: it sets them).
type ListWatch struct {
	// List returns the objects and the list's resourceVersion.
	List  func(ctx context.Context, opts metav1.ListOptions) ([]Object, string, error)
	Watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// objectOf is the pointer type of an object type T.
type objectOf[T any] interface {
	*T
	Object
}

// listWatchOf lists and watches res's objects (of type T) in namespace
// (empty: every namespace) that the selectors select.
func listWatchOf[T any, P objectOf[T]](c *Client, res resource, namespace, fieldSelector, labelSelector string) ListWatch {
	selected := func(opts metav1.ListOptions) metav1.ListOptions {
		opts.FieldSelector, opts.LabelSelector = fieldSelector, labelSelector
		return opts
	}
	return ListWatch{
		List: func(ctx context.Context, opts metav1.ListOptions) ([]Object, string, error) {
			opts = selected(opts)
			var list struct {
				Metadata metav1.ListMeta `json:"metadata"`
				Items    []T             `json:"items"`
			}
			if err := c.do(ctx, request{method: http.MethodGet, res: res, namespace: namespace, options: &opts}, &list); err != nil {
				return nil, "", err
			}
			out := make([]Object, len(list.Items))
			for i := range list.Items {
				out[i] = P(&list.Items[i])
			}
			return out, list.Metadata.ResourceVersion, nil
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return watchOf[T, P](ctx, c, res, namespace, selected(opts))
		},
	}
}

// watchOf watches res's objects (of type T) in namespace that opts select.
// The watch ends with ctx, with Stop, or when the API server ends it.
func watchOf[T any, P objectOf[T]](ctx context.Context, c *Client, res resource, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	resp, err := c.send(ctx, request{method: http.MethodGet, res: res, namespace: namespace, options: &opts})
	if err != nil {
		return nil, err
	}
	return watch.NewStreamWatcher(&eventDecoder[T, P]{body: resp.Body, dec: json.NewDecoder(resp.Body)},
		apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// eventDecoder reads a JSON watch stream: one {"type", "object"} after
// another, the object a T or, for an ERROR, a Status.
type eventDecoder[T any, P objectOf[T]] struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func (d *eventDecoder[T, P]) Decode() (watch.EventType, runtime.Object, error) {
	var e struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := d.dec.Decode(&e); err != nil {
		return "", nil, err
	}
	var obj runtime.Object
	switch e.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		obj = P(new(T))
	case watch.Error:
		obj = &metav1.Status{}
	default:
		return "", nil, fmt.Errorf("a watch event of unknown type %q", e.Type)
	}
	if err := json.Unmarshal(e.Object, obj); err != nil {
		return "", nil, fmt.Errorf("a watch event's %s object: %w", e.Type, err)
	}
	return e.Type, obj, nil
}

func (d *eventDecoder[T, P]) Close() { _ = d.body.Close() }
