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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

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
		if idle, busy := lifecycle.Idleness(tc.pods, true, DefaultAcceleratorResources, a.claimsAccelerator); idle != tc.idle || !idle && busy != protocol.BusyAccelerators {
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
