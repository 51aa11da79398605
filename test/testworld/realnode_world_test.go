package testworld_test

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// A real node joins the world, runs a pod with a service-account token
// (the projected volume needs kube-root-ca.crt in its namespace), and when
// it stops leaves no process, mount, cgroup, bridge or host path behind.
func TestRealNodeRunsPodsAndLeavesNothing(t *testing.T) {
	testworld.Need(t)
	n := world.RealNodeT(t, testworld.RealNodeOptions{Name: "real-node-basic", Labels: map[string]string{"pool": "real"}})
	node, err := world.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Status.NodeInfo.KubeletVersion; got != testworld.KubernetesVersion {
		t.Errorf("kubelet version %q, want %q", got, testworld.KubernetesVersion)
	}
	if got := node.Labels["pool"]; got != "real" {
		t.Errorf("label pool=%q, want real", got)
	}
	var internal string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	if internal != n.IP {
		t.Errorf("InternalIP %q, want %q", internal, n.IP)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.Name,
			Containers: []corev1.Container{{
				Name: "main", Image: testworld.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if _, err := world.Client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := world.WaitPod(t, "default", "sleeper", "Running with its token mounted", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning
	})
	if running.Status.PodIP == "" || !strings.HasPrefix(running.Status.PodIP, "10.88.") {
		t.Errorf("pod IP %q, want one on the pod bridge 10.88.0.0/16", running.Status.PodIP)
	}

	if err := n.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if left := testworld.RealNodeLeftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := os.Stat(n.Root); err == nil {
		t.Errorf("%s still there", n.Root)
	}
	if _, err := world.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Node %s after stop: %v, want NotFound", n.Name, err)
	}
}

// A real node whose test binary died (the kernel killed its kubelet and
// containerd; shims, containers, mounts, cgroups and bridges stay) is
// found and removed by the leak check, which names what it removed.
func TestRealNodeLeftBehindIsSwept(t *testing.T) {
	testworld.Need(t)
	n := world.RealNodeT(t, testworld.RealNodeOptions{Name: "real-node-abandoned"})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "left-behind", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   n.Name,
			Containers: []corev1.Container{{Name: "main", Image: testworld.PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := world.Client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	world.WaitPod(t, "default", pod.Name, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	n.Abandon()
	t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	if testworld.ShimsRunning() == 0 {
		t.Fatal("no shim outlived the abandoned node: the test shows nothing")
	}
	left, err := testworld.SweepRealNodeLeftovers()
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if len(left) == 0 {
		t.Error("the sweep reported nothing left behind")
	}
	if after := testworld.RealNodeLeftovers(); len(after) > 0 {
		t.Errorf("after the sweep: %v", after)
	}
	if c := testworld.ShimsRunning(); c > 0 {
		t.Errorf("%d shims still running after the sweep", c)
	}
	t.Logf("swept: %v", left)
}
