package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestIdleness(t *testing.T) {
	yes := true
	gpu := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}}}
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
	ds := gpu("dcgm")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: &yes}}
	mirror := gpu("static")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	done := gpu("finished")
	done.Status.Phase = corev1.PodSucceeded
	tpuInit := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "warmup"}, Spec: corev1.PodSpec{InitContainers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"google.com/tpu": resource.MustParse("4")}}}}, Containers: []corev1.Container{{}}}}
	pinned := plain.DeepCopy()
	pinned.Annotations = map[string]string{protocol.PodAnnotationSafeToEvict: "false"}

	tests := []struct {
		name string
		pods []*corev1.Pod
		idle bool
		busy string
	}{
		{"no pods", nil, true, ""},
		{"a pod without accelerators", []*corev1.Pod{plain}, true, ""},
		{"DaemonSet, mirror and finished pods with GPUs", []*corev1.Pod{ds, mirror, done}, true, ""},
		{"a GPU pod", []*corev1.Pod{plain, gpu("trainer")}, false, protocol.BusyAccelerators},
		{"a TPU init container", []*corev1.Pod{tpuInit}, false, protocol.BusyAccelerators},
		{"safe-to-evict false wins", []*corev1.Pod{gpu("trainer"), pinned}, false, protocol.BusySafeToEvict},
	}
	for _, tc := range tests {
		idle, busy := idleness(tc.pods, DefaultAcceleratorResources, noClaims)
		if idle != tc.idle || busy != tc.busy {
			t.Errorf("%s: idleness = %t %q, want %t %q", tc.name, idle, busy, tc.idle, tc.busy)
		}
	}
	if idle, _ := idleness([]*corev1.Pod{tpuInit}, []corev1.ResourceName{protocol.ResourceGPU}, noClaims); !idle {
		t.Error("a TPU pod made the node busy when only GPUs count")
	}
}

func noClaims(*corev1.Pod) bool { return false }

// claimsAPI serves ResourceClaims by "namespace/name", and counts reads.
type claimsAPI struct {
	nopAPI
	claims map[string]*resourcev1.ResourceClaim
	reads  *int
}

func (c claimsAPI) GetResourceClaim(_ context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	*c.reads++
	if name == "forbidden" {
		return nil, apierrors.NewForbidden(resourcev1.Resource("resourceclaims"), name, errors.New("no RBAC"))
	}
	if cl, ok := c.claims[namespace+"/"+name]; ok {
		return cl, nil
	}
	return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaims"), name)
}

// TestIdlenessThroughClaims: a pod that holds GPUs through a ResourceClaim
// (dynamic resource allocation) keeps its node busy, as one requesting
// nvidia.com/gpu does: the device classes of its claim's requests are read
// (once per claim), and one of an accelerator class, a claim that cannot
// be read, or one still to be made from its template is busy. A claim for
// another class, one gone, a DaemonSet's or a finished pod's is not.
func TestIdlenessThroughClaims(t *testing.T) {
	claim := func(name string, classes ...string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
		for i, class := range classes {
			r := resourcev1.DeviceRequest{Name: fmt.Sprintf("r%d", i)}
			if i == 0 {
				r.Exactly = &resourcev1.ExactDeviceRequest{DeviceClassName: class}
			} else {
				r.FirstAvailable = []resourcev1.DeviceSubRequest{{Name: "any", DeviceClassName: class}}
			}
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, r)
		}
		return c
	}
	api := claimsAPI{claims: map[string]*resourcev1.ResourceClaim{
		"ml/trainer-gpus": claim("trainer-gpus", "gpu.nvidia.com"),
		"ml/nic":          claim("nic", "rdma.example.com"),
		"ml/either":       claim("either", "rdma.example.com", "mig.nvidia.com"),
	}, reads: new(int)}
	a, err := New(Options{Client: api, NodeName: "n", Watcher: nopWatcher{}, Pods: &drain.NodePods{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name string, claims ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
		for _, c := range claims {
			ref := corev1.PodResourceClaim{Name: "devices"}
			switch {
			case c == "":
				ref.ResourceClaimTemplateName = ptr.To("gpus") // not made yet
			case strings.HasPrefix(c, "template:"):
				ref.ResourceClaimTemplateName = ptr.To("gpus")
				p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "devices", ResourceClaimName: ptr.To(strings.TrimPrefix(c, "template:"))}}
			default:
				ref.ResourceClaimName = ptr.To(c)
			}
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, ref)
		}
		return p
	}
	yes := true
	ds := pod("dcgm", "trainer-gpus")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "dcgm", Controller: &yes}}
	done := pod("finished", "trainer-gpus")
	done.Status.Phase = corev1.PodSucceeded
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		idle bool
	}{
		{"GPUs through a claim made from a template", []*corev1.Pod{pod("trainer", "template:trainer-gpus")}, false},
		{"GPUs through a claim of its own", []*corev1.Pod{pod("trainer", "trainer-gpus")}, false},
		{"a MIG slice as its first available choice", []*corev1.Pod{pod("inference", "either")}, false},
		{"a claim for another class of device", []*corev1.Pod{pod("web", "nic")}, true},
		{"a claim that is gone", []*corev1.Pod{pod("web", "gone")}, true},
		{"a claim that cannot be read", []*corev1.Pod{pod("trainer", "forbidden")}, false},
		{"a claim still to be made from its template", []*corev1.Pod{pod("trainer", "")}, false},
		{"a DaemonSet's and a finished pod's GPU claims", []*corev1.Pod{ds, done}, true},
	} {
		a.readClaims(context.Background(), tc.pods)
		if idle, busy := idleness(tc.pods, DefaultAcceleratorResources, a.claimsAccelerator); idle != tc.idle || !idle && busy != protocol.BusyAccelerators {
			t.Errorf("%s: idle %t (%q), want %t", tc.name, idle, busy, tc.idle)
		}
	}
	reads := *api.reads
	a.readClaims(context.Background(), []*corev1.Pod{pod("trainer", "trainer-gpus")})
	a.readClaims(context.Background(), []*corev1.Pod{pod("trainer", "trainer-gpus")})
	if got := *api.reads - reads; got != 1 {
		t.Errorf("a claim read %d times over two steps after it was forgotten; want once", got)
	}
}
