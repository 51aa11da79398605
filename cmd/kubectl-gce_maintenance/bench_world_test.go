package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkPluginStatus runs the plugin's binary, built as it ships
// (stripped), for `status` over a pool of 50 nodes with a pending notice
// each, and reports its peak RSS and its time.
func BenchmarkPluginStatus(b *testing.B) {
	testworld.Need(b)
	bin := filepath.Join(b.TempDir(), "kubectl-gce_maintenance")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	for i := range 50 {
		name := fmt.Sprintf("rss-%d", i)
		world.NodeT(b, testworld.NodeSpec{Name: name, Pool: "plugin-rss"})
		publish(b, name, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(time.Now().Add(76*time.Hour), true)
		})
	}
	var peaks []int64
	var took []time.Duration
	for b.Loop() {
		cmd := exec.Command(bin, "--kubeconfig", world.Kubeconfig, "status", "--pool", "plugin-rss")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("status: %v\n%s", err, out)
		}
		took = append(took, time.Since(start))
		peaks = append(peaks, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) // KiB
	}
	slices.Sort(peaks)
	slices.Sort(took)
	b.ReportMetric(float64(peaks[len(peaks)-1])/1024, "peak-RSS-MiB")
	fmt.Printf("kubectl-gce_maintenance status over 50 nodes: peak RSS %.1f MiB (most of %d runs), %s (p50)\n",
		float64(peaks[len(peaks)-1])/1024, len(peaks), took[len(took)/2].Round(time.Millisecond))
}
