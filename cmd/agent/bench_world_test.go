package main

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkNoticeThroughTheNode: the latency from a change on the VM's
// metadata server to a pod's client, long-polling the agent's notice
// endpoint with the official metadata client, hearing it: 100 reschedules
// of the notice, p50 and p99.
func BenchmarkNoticeThroughTheNode(b *testing.B) {
	testworld.Need(b)
	const node = "agent-bench-notice"
	world.NodeT(b, testworld.NodeSpec{Name: node})
	emu := gceemu.StartT(b, gceemu.Config{Name: node})
	notice := testworld.FreeAddrT(b)
	runAgent(b, node, emu, "--notice-listen-address", notice)
	b.Setenv("GCE_METADATA_HOST", notice)
	w := metadata.NewWatcher(metadata.WatcherOptions{Timeout: time.Minute, Backoff: backoff.Policy{Base: 50 * time.Millisecond, Max: time.Second}})
	ctx := testworld.Ctx(b, 5*time.Minute)
	heard := make(chan metadata.Answer, 16)
	go func() {
		_ = w.Watch(ctx, metadata.KeyUpcomingMaintenance, func(_ context.Context, a metadata.Answer) bool { heard <- a; return true })
	}()
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	var lat []time.Duration
	b.ResetTimer()
	for i := range 101 {
		start := base.Add(time.Duration(i) * time.Minute)
		changed := time.Now()
		emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
		for {
			var a metadata.Answer
			select {
			case a = <-heard:
			case <-ctx.Done():
				b.Fatalf("change %d never reached the client", i)
			}
			if n, present, err := metadata.ParseNotice(a.Value); err == nil && present && n.WindowStart.Equal(start) {
				break
			}
		}
		if i > 0 { // the first is the client's first answer, not a change
			lat = append(lat, time.Since(changed))
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}
