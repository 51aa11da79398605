package aggregator_test

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
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
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkWholePass times the aggregator's whole pass in the test world,
// one pass at a time: the read of its node cache, the claims Lease read
// (and written when it picks a node), the slice asks, the faults, the
// decision, its Events, its trigger and the wait for its node cache to show
// it. The fleet is 5,000, 20,000 and then 65,000 Nodes in pools of 100,
// each with a pending notice and busy, as agents publish them (no kubelet
// or kwok heart-beats them: the aggregator's watch sees only the
// benchmark's writes). Before each pass 10 Nodes, or 1% of them, change
// (an agent's write each, spread over the fleet): one goes idle for two
// hours and is picked, the one picked the pass before is busy again and
// its trigger gone, and the others go idle too briefly or busy again, so
// that their decisions change and each is told in an Event. A round (the
// writes, then the pass) begins at least MinInterval (1 s) after the pass
// before began, as the aggregator runs its passes: back to back, 10 changed
// made a round every 60 ms, and each pass shared the API server with the
// Events of the passes before it (10 a pass, sent at the recorder's client's
// 50 a second, take 200 ms). After 1% changed a round takes longer than
// that alone. It prints the
// mean and the slowest of 20 passes, how many pools each decided again,
// and the CPU each process of the machine used, at rest and while the
// passes were timed. The world's node lifecycle controller looks at every
// node's health once a minute, not every 5 s: at 65,000 nodes its default
// sweep took 20 s of the two cores' CPU in the 63 s the passes after 1%
// changed were timed (9.9 s once a minute), work that in a cluster is the
// control plane's machines', not the aggregator's cores'.
func BenchmarkWholePass(b *testing.B) {
	if testing.Short() {
		b.Skip("needs the test world")
	}
	w := scaleWorldWith(b, testworld.Options{NodeMonitorPeriod: time.Minute})
	created, writes := 0, 0
	sizes := []int{5000, 20000, 65000}
	for _, size := range sizes {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		began := time.Now()
		parallel(b, size-created, 32, func(i int) error { return createPassNode(ctx, w, created+i) })
		created = size
		// The API server taints each new node not-ready until the node
		// lifecycle controller sees it Ready: the fleet is steady once
		// no node is tainted.
		err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 20*time.Minute, true, func(context.Context) (bool, error) {
			list, err := w.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=pass", ResourceVersion: "0"})
			return err == nil && !slices.ContainsFunc(list.Items, func(n corev1.Node) bool { return len(n.Spec.Taints) > 0 }), nil
		})
		if err != nil {
			b.Fatalf("nodes still tainted: %v", err)
		}
		fmt.Printf("%d nodes in %d pools created and untainted in %s\n", size, size/100, time.Since(began).Round(time.Second))
		// The clients as cmd/aggregator makes them: 50 requests a second
		// (burst 100), the Events through a client of their own.
		cfg := rest.CopyConfig(w.Config)
		cfg.QPS, cfg.Burst = 50, 100
		c, err := kube.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		events, err := kube.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		l, err := coordinationv1client.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		a, err := aggregator.New(aggregator.Options{Client: c, Leases: l, EventClient: events, Namespace: "default", Identity: "pass", LeaseName: fmt.Sprintf("pass-%d", size),
			Metrics: metrics.NewAggregator(metrics.NewRegistry()), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			b.Fatal(err)
		}
		pass, await, stop, err := a.Lead(ctx)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		pass()
		fmt.Printf("whole pass over %d nodes, a new leader's first: %s\n", size, time.Since(t0).Round(time.Millisecond))
		// A new leader says why of every node (an Event each, as many as
		// its recorder queues, sent at its client's rate): the passes are
		// timed once they are sent.
		for last := int64(-1); ; time.Sleep(2 * time.Second) {
			list, err := w.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				b.Fatal(err)
			}
			n := int64(len(list.Items))
			if list.RemainingItemCount != nil {
				n += *list.RemainingItemCount
			}
			if n == last {
				break
			}
			last = n
		}
		// What the world takes at rest: the passes share the two cores
		// with it.
		rest := processCPU()
		time.Sleep(10 * time.Second)
		fmt.Printf("CPU used in 10 s at rest, %d nodes: %s\n", size, cpuUsed(rest, processCPU()))
		picked, touched := -1, map[int]bool{}
		for _, changed := range []int{10, size / 100} {
			b.Run(fmt.Sprintf("nodes=%d/changed=%d", size, changed), func(b *testing.B) {
				var total, slowest time.Duration
				before := processCPU()
				passes, decided := 0, 0
				var lastPass time.Time
				for b.Loop() {
					for range 20 {
						// A round at most once per MinInterval, as the
						// aggregator runs its passes.
						time.Sleep(time.Until(lastPass.Add(aggregator.Default.MinInterval)))
						writes++ // a value no write of this benchmark had before
						idx := spread(size, changed, writes, picked)
						for _, i := range idx {
							touched[i] = true
						}
						names, versions := make([]string, len(idx)), map[string]string{}
						var mu sync.Mutex
						parallel(b, len(idx), 32, func(k int) error {
							names[k] = passNodeName(idx[k])
							state := "picked"
							switch {
							case idx[k] == picked || k > 0 && (k+writes)%2 == 0:
								state = "busy"
							case k > 0:
								state = "brief"
							}
							rv, err := setPassNode(ctx, w, idx[k], state, writes)
							mu.Lock()
							versions[names[k]] = rv
							mu.Unlock()
							return err
						})
						await(versions)
						start := time.Now()
						lastPass = start
						decided += pass()
						d := time.Since(start)
						total += d
						slowest = max(slowest, d)
						passes++
						picked = idx[0]
						n, err := w.Client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
						if err != nil {
							b.Fatal(err)
						}
						if _, ok := n.Labels[protocol.LabelPerformMaintenance]; !ok {
							b.Fatalf("%s, idle for two hours, was not picked", names[0])
						}
					}
				}
				mean := total / time.Duration(passes)
				fmt.Printf("CPU used while %d nodes changed and were decided 20 times: %s\n", changed, cpuUsed(before, processCPU()))
				b.ReportMetric(float64(mean.Microseconds())/1000, "ms/pass")
				b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-ms")
				fmt.Printf("whole pass over %d nodes after %d changed: %s mean, %s the slowest of %d, %.0f pools decided again (of %d)\n",
					size, changed, mean.Round(10*time.Microsecond), slowest.Round(10*time.Microsecond), passes, float64(decided)/float64(passes), size/100)
			})
		}
		stop()
		if size != sizes[len(sizes)-1] {
			// Every node written busy again, its trigger gone: a node
			// left idle would reach its idle time while the next fleet
			// is created, and be picked there with the one each pass
			// expects.
			left := slices.Collect(maps.Keys(touched))
			parallel(b, len(left), 32, func(k int) error {
				_, err := setPassNode(ctx, w, left[k], "busy", writes)
				return err
			})
		}
		cancel()
	}
}

// spread is which nodes of size change in pass iter: changed of them,
// spread over the fleet's pools, the first a node not picked before and
// picked (when it was picked the pass before) among them.
func spread(size, changed, iter, picked int) []int {
	seen := map[int]bool{}
	var out []int
	for i := 0; len(out) < changed; i++ {
		j := (i*6491 + iter*7919) % size
		if !seen[j] && (len(out) > 0 || j != picked) {
			seen[j] = true
			out = append(out, j)
		}
	}
	if picked >= 0 && !seen[picked] {
		out[len(out)-1] = picked
	}
	return out
}

func passNodeName(i int) string { return fmt.Sprintf("pass-%05d", i) }

// createPassNode creates node i of the benchmark's fleet: Ready, busy,
// with a pending notice, in pool i/100.
func createPassNode(ctx context.Context, w *testworld.World, i int) error {
	start := time.Now().Add(3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: passNodeName(i),
			Labels: map[string]string{testworld.LabelNodePool: fmt.Sprintf("pass-pool-%03d", i/100), "type": "pass"},
			Annotations: map[string]string{
				protocol.AnnotationOpportunisticConfig: "node-idle-time=600s,min-nodes=90,window=2419200s,max-unavailable=10",
				protocol.AnnotationUpcomingMaintenance: `{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"` + start + `"}`,
				protocol.AnnotationBusy:                protocol.BusyAccelerators,
			}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
	}
	_, err := w.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	return err
}

// setPassNode writes node i as its agent would: "picked" idle for two
// hours, "brief" idle for a minute, "busy" busy with no trigger; iter
// makes each write a change. It returns the Node's new resourceVersion.
func setPassNode(ctx context.Context, w *testworld.World, i int, state string, iter int) (string, error) {
	idle, busy := `null`, `"`+protocol.BusyAccelerators+`"`
	switch state {
	case "picked":
		idle, busy = `"`+time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339)+`"`, `null`
	case "brief":
		idle, busy = `"`+time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)+`"`, `null`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s,%q:%s,%q:null,"bench.maintenance-handler.io/write":"%d"},"labels":{%q:null}}}`,
		protocol.AnnotationBusy, busy, protocol.AnnotationIdleSince, idle, protocol.AnnotationMaintenanceState, iter, protocol.LabelPerformMaintenance)
	n, err := w.Client.CoreV1().Nodes().Patch(ctx, passNodeName(i), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return "", err
	}
	return n.ResourceVersion, nil
}

// processCPU is the CPU time each process but the kernel's has used so
// far, by name (those of one name summed), from /proc.
func processCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue // not a process
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline")); err != nil || len(cmdline) == 0 {
			continue // gone, or the kernel's
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		// pid (comm) state ... utime stime (the 14th and 15th fields)
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		user, _ := strconv.Atoi(f[11])
		system, _ := strconv.Atoi(f[12])
		out[s[open+1:end]] += time.Duration(user+system) * 10 * time.Millisecond // clock ticks of 10 ms
	}
	return out
}

// cpuUsed says what the processes used between before and after, the
// most first.
func cpuUsed(before, after map[string]time.Duration) string {
	names := slices.Collect(maps.Keys(after))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(after[b]-before[b], after[a]-before[a]) })
	var out []string
	for _, name := range names {
		if d := after[name] - before[name]; d > 0 && len(out) < 7 {
			out = append(out, fmt.Sprintf("%s %.1f s", name, d.Seconds()))
		}
	}
	return strings.Join(out, ", ")
}
