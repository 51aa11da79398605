package protocol_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// TestHasAccelerators: a node has accelerators when its capacity or
// allocatable counts one of the resources, or GKE labels it a GPU or TPU
// node (before its device plugin registers).
func TestHasAccelerators(t *testing.T) {
	gpus := []corev1.ResourceName{protocol.ResourceGPU}
	for _, tc := range []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"none", corev1.Node{}, false},
		{"GPUs in capacity", corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("8")}}}, true},
		{"zero GPUs", corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{protocol.ResourceGPU: resource.MustParse("0")}}}, false},
		{"TPUs, when only GPUs count", corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")}}}, false},
		{"GKE's GPU label", corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.LabelGPUAccelerator: "nvidia-h100-80gb"}}}, true},
		{"GKE's TPU label", corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{protocol.LabelTPUAccelerator: "tpu-v5p-slice"}}}, true},
	} {
		if got := protocol.HasAccelerators(&tc.node, gpus); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}
