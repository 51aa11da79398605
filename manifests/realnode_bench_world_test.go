package manifests_test

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkRealNode prints what processes in containers meet on a real
// node with the shipped manifests and image: how soon the agent's pod is
// Ready once its container runs, how soon the notice reaches
// the pod's annotation (the agent's part) and a container's file (the
// kubelet's after it), how soon SIGTERM follows an accepted eviction, the
// smallest margin a 30 s preemption's drain leaves between the last grace's
// end and the stop (workload, kube-system and DaemonSet pods), and the
// agent's memory by its container's cgroup with 30 pods on the node.
func BenchmarkRealNode(b *testing.B) {
	emu, layout := shippedOnRealNodes(b)
	scaleAggregatorToZero(b)
	hostEvictionCheck(b, "maintenance-handler")
	b.Run("AgentReady", func(b *testing.B) {
		// As a DaemonSet rollout meets it: the agent's pod replaced on a
		// node whose kubelet has run longer than a readiness period (a new
		// kubelet delays each first probe by a random part of its period).
		const name = "real-bench-ready"
		_, first := realGPUNode(b, name, layout)
		up := time.Now()
		var samples []time.Duration
		for i := range max(3, b.N) {
			if i == 0 {
				time.Sleep(time.Until(up.Add(11 * time.Second)))
			}
			readyAfter.Delete(name)
			if err := world.Client.CoreV1().Pods(first.Namespace).Delete(testworld.Ctx(b, 10*time.Second), first.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			first = agentPodOn(b, name)
			d, ok := readyAfter.Load(name)
			if !ok {
				b.Fatal("the agent's container was never seen running before Ready")
			}
			samples = append(samples, d.(time.Duration))
			if d.(time.Duration) > 2*time.Second {
				// Why: the kubelet's Events on the pod (a failed probe says
				// what it met).
				evs, err := world.Client.CoreV1().Events(first.Namespace).List(testworld.Ctx(b, 10*time.Second), metav1.ListOptions{FieldSelector: "involvedObject.name=" + first.Name})
				if err == nil {
					for _, e := range evs.Items {
						b.Logf("slow Ready: %s %s: %s", e.Type, e.Reason, e.Message)
					}
				}
			}
		}
		reportQuantiles(b, samples, "Ready-after-running-", "ms")
	})
	b.Run("NoticeInContainer", func(b *testing.B) {
		n, _ := realGPUNode(b, "real-bench-notice", layout)
		ns := world.Namespace(b)
		emu.Clear()
		createWorkload(b, n, testworld.Workload{Namespace: ns, Name: "reader", Grace: 1, ExitOnSIGTERM: true})
		n.WaitRecord(b, ns, "reader", "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
		toPod, toFile := noticeLatencies(b, n, emu, ns, "reader", max(20, b.N))
		reportQuantiles(b, toPod, "pod-", "ms")
		reportQuantiles(b, toFile, "", "ms")
	})
	b.Run("SIGTERMAfterEviction", func(b *testing.B) {
		n, _ := realGPUNode(b, "real-bench-evict", layout)
		ns := world.Namespace(b)
		emu.Clear()
		var delays []time.Duration
		for i := range max(10, b.N) {
			name := "evicted-" + strconv.Itoa(i)
			createWorkload(b, n, testworld.Workload{Namespace: ns, Name: name, Grace: 1, ExitOnSIGTERM: true})
			n.WaitRecord(b, ns, name, "started", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "start"); return ok })
			if err := world.Client.PolicyV1().Evictions(ns).Evict(testworld.Ctx(b, 10*time.Second), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
				b.Fatal(err)
			}
			accepted := time.Now()
			rec := n.WaitRecord(b, ns, name, "SIGTERM", func(r []testworld.RecordEvent) bool { _, ok := testworld.First(r, "sigterm"); return ok })
			at, _ := testworld.First(rec, "sigterm")
			delays = append(delays, at.At.Sub(accepted))
		}
		reportQuantiles(b, delays, "", "ms")
	})
	b.Run("PreemptionMargin", func(b *testing.B) {
		n, _ := realGPUNode(b, "real-bench-preempt", layout)
		emu.Clear()
		r := runPreemption(b, n, emu)
		b.ReportMetric(float64(r.margin().Milliseconds()), "ms-least-margin-before-stop")
		b.ReportMetric(float64(r.sigterm["lead"].Sub(r.told).Milliseconds()), "ms-lead-SIGTERM-after-told")
	})
	b.Run("AgentMemory30Pods", func(b *testing.B) {
		n, _ := realGPUNode(b, "real-bench-memory", layout)
		ns := world.Namespace(b)
		emu.Clear()
		for i := range 30 {
			createWorkload(b, n, testworld.Workload{Namespace: ns, Name: "pod-" + strconv.Itoa(i), Grace: 1, ExitOnSIGTERM: true})
		}
		world.WaitRunning(b, n.Name, 31) // and the agent
		// Every pod told of a scheduled maintenance: the agent has
		// listed, watched and written them all.
		emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(3*time.Hour), time.Hour))
		for i := range 30 {
			n.WaitRecord(b, ns, "pod-"+strconv.Itoa(i), "the notice", func(r []testworld.RecordEvent) bool {
				for _, e := range r {
					if e.Event == "notice" && strings.Contains(e.Detail, "MAINTENANCE_PHASE=pending") {
						return true
					}
				}
				return false
			})
		}
		procs := n.Processes("/usr/local/bin/agent")
		if len(procs) != 1 {
			b.Fatalf("agent processes: %v", procs)
		}
		usage, rss, err := cgroupMemory(procs[0].Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(usage/(1<<20), "cgroup-MiB")
		b.ReportMetric(rss/(1<<20), "anon-MiB")
	})
}

// reportQuantiles reports the median and the largest of ds in unit, the
// metrics' names starting with prefix.
func reportQuantiles(b *testing.B, ds []time.Duration, prefix, unit string) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, prefix+"p50-"+unit)
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, prefix+"max-"+unit)
}

// cgroupMemory is the memory the cgroup of process pid holds (v1:
// memory.usage_in_bytes; v2: memory.current) and of it the anonymous
// memory (total_rss or anon in memory.stat), in bytes.
func cgroupMemory(pid int) (usage, anon float64, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return 0, 0, err
	}
	dir, usageFile, anonKey := "", "", ""
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, usageFile, anonKey = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.usage_in_bytes", "total_rss"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			dir, usageFile, anonKey = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.current", "anon"
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, 0, err
	}
	usage, err = strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		return 0, 0, err
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, anonKey+" "); ok {
			anon, err = strconv.ParseFloat(v, 64)
		}
	}
	return usage, anon, err
}
