// Package kubetest feeds a kube.Informer from a test: the objects its list
// finds, then the watch events the test sends.
package kubetest

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// Informer is a running kube.Informer whose list found the objects given
// to NewInformer, and whose watch brings what Add sends.
type Informer struct {
	*kube.Informer
	w    *watch.FakeWatcher
	told chan struct{}
}

// NewInformer returns an Informer that has listed objs; it stops when the
// test ends.
func NewInformer(t testing.TB, objs ...kube.Object) *Informer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &Informer{w: watch.NewFake(), told: make(chan struct{}, len(objs)+1)}
	list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, o := range objs {
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	f.Informer = kube.NewInformer(kube.ListWatch{
		List:       func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		Watch:      func(context.Context, metav1.ListOptions) (watch.Interface, error) { return f.w, nil },
		Unstreamed: true,
	}, kube.InformerOptions{Name: "test"})
	f.AddHandlers(kube.OnAnyChange(func() { f.told <- struct{}{} }))
	if err := f.Start(ctx); err != nil {
		t.Fatalf("the informer did not sync: %v", err)
	}
	for range objs {
		<-f.told // the list's
	}
	return f
}

// Add sends an ADDED event of o and returns once the informer keeps it.
func (f *Informer) Add(o kube.Object) {
	f.w.Add(o)
	<-f.told
}
