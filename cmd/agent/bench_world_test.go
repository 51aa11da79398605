package main

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
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
	emu, _, heard := servingNotice(b, "agent-bench-notice", time.Minute)
	ctx := testworld.Ctx(b, 5*time.Minute)
	notices := heard(ctx, metadata.KeyUpcomingMaintenance)
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	var lat []time.Duration
	b.ResetTimer()
	for i := range 101 {
		start := base.Add(time.Duration(i) * time.Minute)
		changed := time.Now()
		emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
		awaitAnswer(b, ctx, notices, fmt.Sprintf("change %d", i), func(a metadata.Answer) bool {
			n, present, err := maintenance.ParseNotice(a.Value)
			return err == nil && present && n.WindowStart.Equal(start)
		})
		if i > 0 { // the first is the client's first answer, not a change
			lat = append(lat, time.Since(changed))
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}
