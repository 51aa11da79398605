package policysource

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/policy"
)

// TestEachVersionParsedOnce: the policy of one version of the ConfigMap
// is parsed once, however often it is asked for, and carries that version;
// a new version is parsed anew, and the fleet reading Version knows it
// changed. No ConfigMap: the empty policy, of its own version.
func TestEachVersionParsedOnce(t *testing.T) {
	cm := func(rv, yaml string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv}, Data: map[string]string{policy.ConfigKey: yaml}}
	}
	w := watch.NewFake()
	s := NewSource(kube.ListWatch{
		Object: &corev1.ConfigMap{},
		List: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		Watch:      func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
		Unstreamed: true,
	}, "ns", "p", nil)
	changed := make(chan struct{}, 4)
	s.OnChange(func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg, err := s.Config(); err != nil || cfg.Version != absent {
		t.Errorf("no ConfigMap: %+v, %v; want the empty policy, version %q", cfg, err, absent)
	}
	w.Add(cm("2", "pools: {a3: {maxVoluntaryMaintenance: 2}}"))
	<-changed
	first, err := s.Config()
	again, _ := s.Config()
	if err != nil || first.Version != "2" || reflect.ValueOf(first.Pools).Pointer() != reflect.ValueOf(again.Pools).Pointer() {
		t.Errorf("version 2 asked twice: %+v, %v; want it parsed once, version 2", first, err)
	}
	w.Modify(cm("3", "pools: {a3: {maxVoluntaryMaintenance: 3}}"))
	<-changed
	next, err := s.Config()
	if err != nil || next.Version != "3" || next.Pools["a3"].MaxVoluntary.Count != 3 {
		t.Errorf("version 3: %+v, %v; want it parsed anew", next, err)
	}
	w.Modify(cm("4", "pools: {a3: [}"))
	<-changed
	if bad, err := s.Config(); err == nil || bad.Version != "4" {
		t.Errorf("version 4, not YAML: %+v, %v; want its error, version 4", bad, err)
	}
}
