package aggregator

// The relay's bounds on one node's asks: one piece of work in flight per
// node and kind (a call, a follow, a read), and a token bucket per node and
// kind for the calls and the VM reads, on the injected clock. A node that
// rotates its asks' IDs starts no more work than one that does not, and
// costs the project's Compute Engine quota at most its rate.

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// DefaultRelayRate is how many calls, and how many VM reads, the relay
// makes for one node per hour once its burst (relayBurst) is spent: a
// node's maintenance needs one call and a few reads.
const DefaultRelayRate = 60

// relayBurst is how many calls (or reads) one node may have made at once.
const relayBurst = 10

// Kinds of relay work (the kind label of relay_limited_total).
const (
	relayCall   = "call"
	relayFollow = "follow"
	relayRead   = "read"
)

// relayBuckets holds a token bucket per node and kind.
type relayBuckets struct {
	clock clock.Clock
	every time.Duration

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newRelayBuckets(c clock.Clock, perHour int) *relayBuckets {
	return &relayBuckets{clock: c, every: time.Hour / time.Duration(max(perHour, 1)), buckets: map[string]*rate.Limiter{}}
}

// take takes a token of node's bucket for kind, and says how long to wait
// before the work it stands for may be done (0: at once), and how to give
// the token back when no work was done after all.
func (b *relayBuckets) take(node, kind string) (time.Duration, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := kind + "/" + node
	l, ok := b.buckets[key]
	if !ok {
		l = rate.NewLimiter(rate.Every(b.every), relayBurst)
		b.buckets[key] = l
	}
	now := b.clock.Now()
	r := l.ReserveN(now, 1)
	return r.DelayFrom(now), func() { r.CancelAt(b.clock.Now()) }
}

// forget drops node's buckets (its Node is gone).
func (b *relayBuckets) forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.buckets, relayCall+"/"+node)
	delete(b.buckets, relayRead+"/"+node)
}

// waitOn waits d on c, or until ctx ends (false then).
func waitOn(ctx context.Context, c clock.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
