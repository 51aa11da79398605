package aggregator_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// BenchmarkAggregatorAtScale runs the aggregator binary against 1,000, 5,000
// and then 20,000 kwok nodes in pools of 100 (kwok heart-beats every one of
// them on the same two cores), each with a pending notice and busy, as the
// agents publish them. At each size it reports the mean pass time (from its
// histogram), its RSS, its CPU and its API requests per minute while
// nothing changes; then a storm: every node's agent writes within one minute (the
// node idle, so that 5 of each pool of 100 are picked, min-nodes being 95),
// and it reports the API requests per minute during the storm, the pass
// time, and how long after a node's write its trigger landed, with the
// decisions that changed by reason and the nodes left NotReady.
//
// It runs in a world of its own, whose controller-manager may send 200
// requests a second (at its default 20 the not-ready taints of 5,000 new
// nodes take ten minutes to lift, each lift waking a pass, and the idle
// would not be idle), and whose node lifecycle controller waits an hour
// for a heartbeat, and for a new node's first (kwok takes minutes to
// heart-beat 15,000 new nodes for the first time): kwok cannot heart-beat 20,000 nodes in time on this
// machine, and with the default 50 s the controller marks nodes NotReady
// and Ready again all along; under min-nodes=95 each such node holds its
// pool's picks back (as it should), and the benchmark would measure kwok.
func BenchmarkAggregatorAtScale(b *testing.B) {
	if testing.Short() {
		b.Skip("needs the test world")
	}
	world := scaleWorld(b)
	bins, err := vms.Binaries()
	if err != nil {
		b.Fatal(err)
	}
	created := 0
	for _, size := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
			defer cancel()
			// The nodes of the smaller size are reset to busy and kept.
			began := time.Now()
			parallel(b, size, 32, func(i int) error {
				if i < created {
					return setIdle(ctx, world, i, false)
				}
				return createScaleNode(ctx, world, i)
			})
			created = size
			// The API server taints each new node not-ready until the
			// node lifecycle controller sees it Ready: idle is when every
			// node is Ready and untainted, or each change would wake a pass.
			err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 15*time.Minute, true, func(context.Context) (bool, error) {
				return settled(ctx, b, world), nil
			})
			if err != nil {
				b.Fatalf("some nodes are not Ready, or tainted: %v", err)
			}
			fmt.Printf("%d kwok nodes in %d pools Ready and untainted in %s\n", size, size/100, time.Since(began).Round(time.Second))

			addr := testworld.FreeAddrT(b)
			// Each size's aggregator in a namespace of its own: a new
			// leader, with its shipped identity and Lease names.
			ns := world.Namespace(b)
			p, err := world.StartProcess(fmt.Sprintf("aggregator-scale-%d", size), filepath.Join(bins, "aggregator"), "--kubeconfig", world.AggregatorKubeconfigT(b, ns),
				"--namespace", ns, "--identity", fmt.Sprintf("scale-%d", size),
				"--config-map", "", "--interval", "30s", "--listen-address", addr, "--log-level", "warn")
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Kill() }()
			for b.Loop() {
				// Idle: the first passes over, nothing changing.
				err = wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
					return scrape(addr)["maintenance_handler_aggregator_pass_duration_seconds_count"] >= 3, nil
				})
				if err != nil {
					b.Fatalf("fewer than 3 passes: %v", err)
				}
				// A new leader says why of every node with a pending notice
				// (an Event each, written at its client's rate, as many as its
				// queue holds): idle begins once they are written.
				posts := func() float64 {
					return scrape(addr)[`maintenance_handler_aggregator_api_requests_total{code="201",method="POST"}`]
				}
				for last := -1.0; ; {
					now := posts()
					if now == last {
						break
					}
					last = now
					time.Sleep(5 * time.Second)
				}
				const idleFor = 30 * time.Second
				before := scrape(addr)
				time.Sleep(idleFor)
				after := scrape(addr)
				idlePerMinute := (requests(after) - requests(before)) * float64(time.Minute) / float64(idleFor)
				const cpu = "process_cpu_seconds_total"
				idleMillicores := (after[cpu] - before[cpu]) * 1000 / idleFor.Seconds()
				rss := rssMiB(b, p)

				// The storm: every node idle, within one minute.
				w, err := world.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: protocol.LabelPerformMaintenance})
				if err != nil {
					b.Fatal(err)
				}
				var mu sync.Mutex
				wrote := map[string]time.Time{}
				// delays: from the node's write to the trigger seen here;
				// decided: to when the aggregator wrote it (its triggered-at,
				// to the second), which tells the aggregator's share of a
				// delay from this watch's.
				var delays, decided []time.Duration
				done := make(chan struct{})
				go func() {
					defer close(done)
					for ev := range w.ResultChan() {
						n, ok := ev.Object.(*corev1.Node)
						if !ok || ev.Type != watch.Added && ev.Type != watch.Modified {
							continue
						}
						mu.Lock()
						if at, ok := wrote[n.Name]; ok {
							delays = append(delays, time.Since(at))
							delete(wrote, n.Name)
							_, _, ms := protocol.ReadTrigger(n)
							if t, err := time.Parse(time.RFC3339, ms.TriggeredAt); err == nil {
								decided = append(decided, t.Sub(at.Truncate(time.Second)))
							}
						}
						mu.Unlock()
					}
				}()
				stormStart := scrape(addr)
				t0 := time.Now()
				tick := time.NewTicker(time.Minute / time.Duration(size))
				parallel(b, size, 32, func(i int) error {
					<-tick.C
					mu.Lock()
					wrote[scaleNodeName(i)] = time.Now()
					mu.Unlock()
					return setIdle(ctx, world, i, true)
				})
				tick.Stop()
				storm := time.Since(t0)
				want := size / 100 * 5
				err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
					mu.Lock()
					defer mu.Unlock()
					return len(delays) >= want, nil
				})
				w.Stop()
				<-done
				if err != nil {
					b.Fatalf("%d of %d triggers after the storm", len(delays), want)
				}
				end := scrape(addr)
				stormPerMinute := (requests(end) - requests(stormStart)) * float64(time.Minute) / float64(time.Since(t0))
				stormMillicores := (end[cpu] - stormStart[cpu]) * 1000 / time.Since(t0).Seconds()
				stormRSS := rssMiB(b, p)
				passes := end["maintenance_handler_aggregator_pass_duration_seconds_count"] - stormStart["maintenance_handler_aggregator_pass_duration_seconds_count"]
				passMean := (end["maintenance_handler_aggregator_pass_duration_seconds_sum"] - stormStart["maintenance_handler_aggregator_pass_duration_seconds_sum"]) / passes
				idleMean := after["maintenance_handler_aggregator_pass_duration_seconds_sum"] / after["maintenance_handler_aggregator_pass_duration_seconds_count"]
				slices.Sort(delays)
				slices.Sort(decided)
				if len(decided) == 0 {
					b.Fatal("no trigger says when it was written")
				}
				var results []string
				for _, r := range []string{"ok", "conflict", "fenced", "error"} {
					k := `maintenance_handler_aggregator_triggers_total{result="` + r + `"}`
					results = append(results, fmt.Sprintf("%s %.0f", r, end[k]-stormStart[k]))
				}
				b.ReportMetric(idleMean*1000, "ms/pass")
				b.ReportMetric(rss, "RSS-MiB")
				b.ReportMetric(stormRSS, "storm-RSS-MiB")
				b.ReportMetric(idleMillicores, "idle-millicores")
				b.ReportMetric(stormMillicores, "storm-millicores")
				b.ReportMetric(idlePerMinute, "idle-requests/min")
				b.ReportMetric(stormPerMinute, "storm-requests/min")
				b.ReportMetric(delays[len(delays)/2].Seconds(), "trigger-delay-p50-s")
				b.ReportMetric(delays[len(delays)-1].Seconds(), "trigger-delay-max-s")
				const requestsTotal, decisionsTotal = "maintenance_handler_aggregator_api_requests_total", "maintenance_handler_aggregator_decisions_total"
				fmt.Printf("aggregator over %d nodes, idle: per minute, API requests by method and code: %s; decisions that changed, by reason: %s\n", size,
					countsBy(before, after, idleFor, requestsTotal, "method", "code"), countsBy(before, after, idleFor, decisionsTotal, "reason"))
				fmt.Printf("aggregator over %d nodes, storm: triggers written %s (p50) and %s (max) after the node's write, to the second (the rest of each delay is the watch that saw it); "+
					"per minute, decisions that changed, by reason: %s; %d nodes not Ready at the end\n",
					size, decided[len(decided)/2], decided[len(decided)-1],
					countsBy(stormStart, end, time.Since(t0), decisionsTotal, "reason"), notReady(ctx, b, world))
				fmt.Printf("aggregator over %d nodes: CPU %.0f millicores idle, %.0f in the storm; RSS %.0f MiB after the storm\n", size, idleMillicores, stormMillicores, stormRSS)
				fmt.Printf("aggregator over %d nodes: %.1f ms per pass (mean of the first %.0f), RSS %.0f MiB, %.1f API requests per minute idle; "+
					"storm (every node written in %s): %.0f requests per minute, %.0f passes of %.1f ms (mean), %d triggers %s (p50) and %s (max) after the node's write; trigger writes: %s\n",
					size, idleMean*1000, after["maintenance_handler_aggregator_pass_duration_seconds_count"], rss, idlePerMinute,
					storm.Round(time.Second), stormPerMinute, passes, passMean*1000, len(delays), delays[len(delays)/2].Round(10*time.Millisecond), delays[len(delays)-1].Round(10*time.Millisecond),
					strings.Join(results, ", "))
			}
		})
	}
}

// scaleWorld starts a world for BenchmarkAggregatorAtScale alone, stopped
// when b ends.
func scaleWorld(b *testing.B) *testworld.World {
	b.Helper()
	return scaleWorldWith(b, testworld.Options{})
}

// scaleWorldWith is scaleWorld with opts, where they are set.
func scaleWorldWith(b *testing.B, opts testworld.Options) *testworld.World {
	b.Helper()
	dir, err := testworld.Dir()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := testworld.Build(ctx, dir, os.Stderr); err != nil {
		b.Fatal(err)
	}
	opts.Dir, opts.NodeMonitorGracePeriod, opts.ControllerQPS = dir, time.Hour, 200
	w, err := testworld.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := w.Stop(); err != nil {
			b.Error(err)
		}
	})
	return w
}

// settled reports whether every node of the scale fleet is Ready and has
// no taint (the control plane's not-ready or unreachable).
func settled(ctx context.Context, b *testing.B, world *testworld.World) bool {
	list, err := world.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok", ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	for _, node := range list.Items {
		if len(node.Spec.Taints) > 0 || !isReady(&node) {
			return false
		}
	}
	return true
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReady counts the scale fleet's nodes whose Ready condition is not
// True (kwok heart-beats them all on the same two cores as the API server).
func notReady(ctx context.Context, b *testing.B, world *testworld.World) int {
	list, err := world.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, node := range list.Items {
		if !isReady(&node) {
			n++
		}
	}
	return n
}

func scaleNodeName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// createScaleNode creates node i of the scale fleet: busy, with a pending
// notice, in pool i%(pools), as its agent would publish it.
func createScaleNode(ctx context.Context, world *testworld.World, i int) error {
	start := time.Now().Add(3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: scaleNodeName(i),
			Labels: map[string]string{testworld.LabelNodePool: fmt.Sprintf("scale-pool-%03d", i/100), "type": "kwok"},
			Annotations: map[string]string{
				testworld.KwokNodeAnnotation:           testworld.KwokNodeValue,
				protocol.AnnotationOpportunisticConfig: "node-idle-time=600s,min-nodes=95,window=2419200s,max-unavailable=5",
				protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"` + start + `"}`,
				protocol.AnnotationBusy:                protocol.BusyAccelerators,
			}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
	}
	_, err := world.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	return err
}

// setIdle writes node i idle for two hours (or busy again, its trigger
// gone), as its agent would.
func setIdle(ctx context.Context, world *testworld.World, i int, idle bool) error {
	patch := `{"metadata":{"annotations":{"` + protocol.AnnotationBusy + `":"` + protocol.BusyAccelerators + `","` + protocol.AnnotationIdleSince + `":null,"` +
		protocol.AnnotationMaintenanceState + `":null},"labels":{"` + protocol.LabelPerformMaintenance + `":null}}}`
	if idle {
		patch = `{"metadata":{"annotations":{"` + protocol.AnnotationBusy + `":null,"` + protocol.AnnotationIdleSince + `":"` +
			time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339) + `"}}}`
	}
	_, err := world.Client.CoreV1().Nodes().Patch(ctx, scaleNodeName(i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// parallel runs f for 0..n-1 on workers goroutines and fails b on the
// first error.
func parallel(b *testing.B, n, workers int, f func(int) error) {
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// scrape reads the aggregator's /metrics into sample -> value (labels
// included in the sample's name).
func scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.LastIndexByte(line, ' '); i > 0 && !strings.HasPrefix(line, "#") {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			out[line[:i]] = v
		}
	}
	return out
}

// countsBy is how often a counter grew per minute between two scrapes over
// d, by the values of its labels, most first ("GET 200 30, ...").
func countsBy(before, after map[string]float64, d time.Duration, counter string, labels ...string) string {
	type count struct {
		key string
		n   float64
	}
	var counts []count
	for k, v := range after {
		if series, ok := strings.CutPrefix(k, counter+"{"); ok {
			if n := (v - before[k]) * float64(time.Minute) / float64(d); n > 0 {
				var key []string
				for _, l := range labels {
					key = append(key, labelValue(series, l))
				}
				counts = append(counts, count{strings.Join(key, " "), n})
			}
		}
	}
	slices.SortFunc(counts, func(a, b count) int { return cmp.Compare(b.n, a.n) })
	var out []string
	for _, c := range counts {
		out = append(out, fmt.Sprintf("%s %.0f", c.key, c.n))
	}
	return strings.Join(out, ", ")
}

// labelValue is the value of name in a series' labels (`a="x",b="y"}`).
func labelValue(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// requests is the aggregator's API requests in a scrape.
func requests(m map[string]float64) float64 {
	sum := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "maintenance_handler_aggregator_api_requests_total{") {
			sum += v
		}
	}
	return sum
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
