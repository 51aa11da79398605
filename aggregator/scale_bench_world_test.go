package aggregator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/fleet"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkAggregator5000Nodes runs the aggregator binary against 5,000
// kwok nodes in 50 pools, each with a pending notice as an agent would
// publish it, and reports the time of one full decision pass (from its own
// histogram) and its resident memory.
func BenchmarkAggregator5000Nodes(b *testing.B) {
	testworld.Need(b)
	const nodes, pools = 5000, 50
	bins, err := fleet.Binaries()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now().Add(3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	began := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				n := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%05d", i),
						Labels: map[string]string{testworld.LabelNodePool: fmt.Sprintf("scale-pool-%02d", i%pools), "type": "kwok"},
						Annotations: map[string]string{
							testworld.KwokNodeAnnotation:           testworld.KwokNodeValue,
							protocol.AnnotationOpportunisticConfig: "node-idle-time=600s,min-nodes=95,window=2419200s",
							protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"` + start + `"}`,
							protocol.AnnotationBusy:                protocol.BusyAccelerators,
						}},
					Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
				}
				if _, err := world.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
					errMu.Lock()
					firstErr = err
					errMu.Unlock()
				}
			}
		}()
	}
	for i := range nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	fmt.Printf("created %d kwok nodes in %d pools in %s\n", nodes, pools, time.Since(began).Round(time.Second))

	addr := testworld.FreeAddrT(b)
	p, err := world.StartProcess("aggregator-scale", filepath.Join(bins, "aggregator"), "--kubeconfig", world.Kubeconfig, "--namespace", "default",
		"--identity", "scale", "--config-map", "", "--interval", "2s", "--listen-address", addr, "--log-level", "warn")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Kill() }()
	var passes, sum float64
	for b.Loop() {
		err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
			passes, sum = passStats(addr)
			return passes >= 5, nil
		})
		if err != nil {
			b.Fatalf("fewer than 5 passes: %v", err)
		}
	}
	rss := rssMiB(b, p)
	b.ReportMetric(sum/passes*1000, "ms/pass")
	b.ReportMetric(rss, "RSS-MiB")
	fmt.Printf("aggregator over %d nodes in %d pools: %.1f ms per decision pass (mean of %.0f), RSS %.0f MiB\n", nodes, pools, sum/passes*1000, passes, rss)
}

// passStats reads the pass histogram's count and sum from /metrics.
func passStats(addr string) (count, sum float64) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "maintenance_handler_aggregator_pass_duration_seconds_count":
			count = v
		case "maintenance_handler_aggregator_pass_duration_seconds_sum":
			sum = v
		}
	}
	return count, sum
}

func rssMiB(b *testing.B, p *testworld.Process) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kib / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
