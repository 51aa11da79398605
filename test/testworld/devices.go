package testworld

// A DRA driver's devices on a node, as its kubelet plugin publishes them.

import (
	"context"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Devices publishes node's devices of driver in one ResourceSlice
// (resource.k8s.io/v1) whose pool is named after the node, as the DRA
// kubelet plugin does by default, and deletes it when t ends. It returns
// the slice's name. A device's taints need Kubernetes 1.36 or later (on by
// default from then): before, the API server drops them, and t is skipped.
func (w *World) Devices(t testing.TB, node, driver string, devices ...resourcev1.Device) string {
	t.Helper()
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: &node, Devices: devices}}
	made, err := w.Client.ResourceV1().ResourceSlices().Create(Ctx(t, 10*time.Second), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.Client.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
	})
	for i, d := range devices {
		if len(d.Taints) > 0 && len(made.Spec.Devices[i].Taints) == 0 {
			t.Skipf("device taints not kept on Kubernetes %s (on by default from 1.36)", KubernetesVersion)
		}
	}
	return s.Name
}

// Serves reports whether the world's API server serves resource of
// groupVersion ("resource.k8s.io/v1", "devicetaintrules"): what a minor
// serves by default differs.
func (w *World) Serves(t testing.TB, groupVersion, resource string) bool {
	t.Helper()
	list, err := w.Client.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}
