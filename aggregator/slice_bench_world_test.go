package aggregator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkSliceFollows: one host of a multi-host slice of 4, 16 or 64
// hosts (a real agent process on each, the shipped defaults) is preempted;
// how long until every other host is tainted, and until every other
// host's pod is given its SIGTERM, with an aggregator leading and with none.
func BenchmarkSliceFollows(b *testing.B) {
	testworld.Need(b)
	for _, size := range []int{4, 16, 64} {
		for _, withAggregator := range []bool{true, false} {
			name := fmt.Sprintf("hosts=%d/aggregator=%t", size, withAggregator)
			b.Run(name, func(b *testing.B) {
				ctx := testworld.Ctx(b, 10*time.Minute)
				pool := fmt.Sprintf("bench-%d-%t", size, withAggregator)
				s := newSlice(b, ctx, pool, size)
				if withAggregator {
					s.p.aggregator("agg-"+pool, testworld.FreeAddrT(b))
				}
				b.ResetTimer()
				start := time.Now()
				s.preempt(b, ctx, s.hosts[1])
				err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
					s.mu.Lock()
					defer s.mu.Unlock()
					return len(s.tainted) == size && len(s.stopped) == size, nil
				})
				b.StopTimer()
				if err != nil {
					b.Fatalf("not every host tainted (%d) and every pod stopped (%d) of %d", len(s.tainted), len(s.stopped), size)
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				var tainted, stopped time.Duration
				for _, h := range s.hosts {
					tainted = max(tainted, s.tainted[h].Sub(start))
				}
				for i := range size {
					// Seen deleted: on a real kubelet, SIGTERM follows.
					st := s.stopped[fmt.Sprintf("job-%d", i)]
					stopped = max(stopped, st.told.Sub(start))
				}
				b.ReportMetric(tainted.Seconds(), "s-every-host-tainted")
				b.ReportMetric(stopped.Seconds(), "s-every-pod-SIGTERM")
			})
		}
	}
}
