package agent_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// watchNode streams the node's updates.
func watchNode(b *testing.B, name string) <-chan *corev1.Node {
	w, err := world.Client.CoreV1().Nodes().Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	out := make(chan *corev1.Node, 256)
	go func() {
		defer close(out)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Error {
				out <- n
			}
		}
	}()
	return out
}

func until(b *testing.B, ch <-chan *corev1.Node, cond func(*corev1.Node) bool) time.Time {
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				b.Fatal("node watch closed")
			}
			if cond(n) {
				return time.Now()
			}
		case <-timeout:
			b.Fatal("timed out")
		}
	}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkTaintLatency measures the time from a metadata change
// (maintenance-event turning TERMINATE_ON_HOST_MAINTENANCE) to the taint
// being visible in the API server, over 100 maintenances of one node.
func BenchmarkTaintLatency(b *testing.B) {
	testworld.Need(b)
	const events = 100
	name := "bench-taint-0"
	v := newVM(b, name)
	emu := v.emu
	r := startAgent(b, v, lifecycle.DefaultConfig)
	nodes := watchNode(b, name)
	var lat []time.Duration
	var cold time.Duration
	maintain := func() time.Duration {
		start := time.Now()
		emu.SetMaintenanceEvent(gceemu.EventTerminate)
		at := until(b, nodes, protocol.HasTaint)
		until(b, nodes, func(n *corev1.Node) bool {
			return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
		})
		r = reboot(b, v, r)
		until(b, nodes, func(n *corev1.Node) bool { return !protocol.HasTaint(n) })
		return at.Sub(start)
	}
	for b.Loop() {
		// The first maintenance after the agent starts pays for warming
		// its connections; it is reported apart.
		cold = maintain()
		lat = lat[:0]
		for range events {
			lat = append(lat, maintain())
		}
	}
	fmt.Printf("taint latency: first maintenance after start %s (cold, not counted)\n", cold.Round(time.Microsecond))
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	fmt.Printf("taint latency over %d maintenances: p50 %s, p99 %s, max %s\n", len(lat),
		percentile(lat, 0.5).Round(time.Microsecond), percentile(lat, 0.99).Round(time.Microsecond), percentile(lat, 1).Round(time.Microsecond))
}

// BenchmarkDrain110Pods drains a node with 110 pods (the kubelet's default
// maximum) whose grace periods run from 0 to 10 s, each taking its whole
// grace to stop, no PDBs; it reports the time past the longest grace until
// the node is labelled terminating.
func BenchmarkDrain110Pods(b *testing.B) {
	testworld.Need(b)
	const pods = 110
	name := "bench-drain-0"
	v := newVM(b, name)
	emu := v.emu
	ns := fmt.Sprintf("bench-drain-%d", time.Now().UnixNano())
	if _, err := world.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = world.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	testworld.WaitFor(b, world.Client.CoreV1().RESTClient(), "serviceaccounts", ns, "default", "exists", func(*corev1.ServiceAccount) bool { return true })
	r := startAgent(b, v, lifecycle.DefaultConfig)
	nodes := watchNode(b, name)
	var past []time.Duration
	for b.Loop() {
		for i := range pods {
			grace := int64(i % 11)
			p := makePod(ns, fmt.Sprintf("p-%d", i), name, grace, time.Duration(grace)*time.Second)
			if _, err := world.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		world.WaitRunning(b, name, pods)
		start := time.Now()
		emu.SetMaintenanceEvent(gceemu.EventTerminate)
		done := until(b, nodes, func(n *corev1.Node) bool {
			return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
		})
		past = append(past, done.Sub(start)-10*time.Second)
		r = reboot(b, v, r)
		until(b, nodes, func(n *corev1.Node) bool { return !protocol.HasTaint(n) })
	}
	b.ReportMetric(float64(percentile(past, 1).Milliseconds()), "ms-past-longest-grace")
	fmt.Printf("drain of %d pods (grace 0-10 s): terminating %s after the longest grace (worst of %d)\n", pods, percentile(past, 1).Round(time.Millisecond), len(past))
}
