package testworld

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// Accelerator resource names and node labels used on GKE.
const (
	ResourceGPU = corev1.ResourceName(protocol.ResourceGPU)
	ResourceTPU = corev1.ResourceName(protocol.ResourceTPU)

	LabelNodePool       = protocol.LabelNodePool
	LabelGPUAccelerator = protocol.LabelGPUAccelerator
	LabelTPUAccelerator = protocol.LabelTPUAccelerator
	LabelTPUTopology    = protocol.LabelTPUTopology
	LabelSpot           = "cloud.google.com/gke-spot"
)

// NodeSpec describes a fake accelerator node.
type NodeSpec struct {
	Name string
	// Pool is the node pool label value; empty means "default-pool".
	Pool string
	// TPU makes a TPU node (google.com/tpu) instead of a GPU node.
	TPU bool
	// Accelerators is the allocatable count; zero means 8 GPUs or 4 TPU chips.
	Accelerators int64
	// Unregistered: the accelerators are not in the Node's capacity or
	// allocatable yet, as before the device plugin registers them.
	Unregistered bool
	// NoAccelerators makes a node without accelerators (an H4D VM, say):
	// no accelerator label or resource.
	NoAccelerators bool
	// Project and Zone go into spec.providerID gce://project/zone/name.
	Project, Zone string
	// Spot labels the node as a Spot VM.
	Spot bool
	// Labels are added to the defaults.
	Labels map[string]string
	// KubeletVersion is reported in status.nodeInfo; empty means
	// KubernetesVersion.
	KubeletVersion string
}

// AddNode creates a kwok-managed Node for spec and waits until it is Ready
// and schedulable (kwok has initialised it and the node-lifecycle controller
// has removed the not-ready taint).
func (w *World) AddNode(ctx context.Context, spec NodeSpec) (*corev1.Node, error) {
	if spec.Pool == "" {
		spec.Pool = "default-pool"
	}
	if spec.Project == "" {
		spec.Project = "test-project"
	}
	if spec.Zone == "" {
		spec.Zone = "us-central1-a"
	}
	if spec.KubeletVersion == "" {
		spec.KubeletVersion = KubernetesVersion
	}
	labels := map[string]string{
		corev1.LabelHostname:     spec.Name,
		corev1.LabelOSStable:     "linux",
		corev1.LabelArchStable:   "amd64",
		corev1.LabelTopologyZone: spec.Zone,
		LabelNodePool:            spec.Pool,
		"type":                   "kwok",
	}
	res, count := ResourceGPU, spec.Accelerators
	switch {
	case spec.NoAccelerators:
	case spec.TPU:
		res = ResourceTPU
		if count == 0 {
			count = 4
		}
		labels[LabelTPUAccelerator] = "tpu-v5p-slice"
		labels[LabelTPUTopology] = "2x2x1"
	default:
		if count == 0 {
			count = 8
		}
		labels[LabelGPUAccelerator] = "nvidia-h100-80gb"
	}
	if spec.Spot {
		labels[LabelSpot] = "true"
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("208"),
		corev1.ResourceMemory: resource.MustParse("1872Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if !spec.Unregistered && !spec.NoAccelerators {
		resources[res] = *resource.NewQuantity(count, resource.DecimalSI)
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: KwokNodeValue},
		},
		Spec: corev1.NodeSpec{
			ProviderID: fmt.Sprintf("gce://%s/%s/%s", spec.Project, spec.Zone, spec.Name),
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources,
			NodeInfo: corev1.NodeSystemInfo{
				BootID:          NewBootID(),
				KubeletVersion:  spec.KubeletVersion,
				Architecture:    "amd64",
				OperatingSystem: "linux",
			},
		},
	}
	created, err := w.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create node %q: %w", spec.Name, err)
	}
	var ready *corev1.Node
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := w.Client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ready = n
		return NodeReady(n) && !protocol.HasTaintKey(n, corev1.TaintNodeNotReady), nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %q never became Ready and schedulable: %w", spec.Name, err)
	}
	return ready, nil
}

// NewBootID returns a random boot ID in the kernel's format.
func NewBootID() string {
	s := randSuffix(32)
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// NodeReady reports whether n has condition Ready=True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

var nsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a namespace for t, named after the test, waits until
// its default service account exists, and deletes it when t ends.
func (w *World) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.Trim(nsUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	name := base + "-" + randSuffix(5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := w.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %q: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ignoreNotFound(w.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})); err != nil {
			t.Errorf("delete namespace %q: %v", name, err)
		}
	})
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := w.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %q: default service account never appeared: %v", name, err)
	}
	return name
}

// Ctx returns a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NodeT is AddNode for a test: it fails t on error and deletes the Node
// when t ends.
func (w *World) NodeT(t testing.TB, spec NodeSpec) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n, err := w.AddNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
	})
	return n
}
