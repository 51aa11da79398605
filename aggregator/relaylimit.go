package aggregator

// The relay's bounds on one node's asks: one piece of work in flight per
// node and kind (a call, a follow, a read), and a token bucket per node and
// kind for the calls and the VM reads, on the injected clock. A node that
// rotates its asks' IDs starts no more work than one that does not, and
// costs the project's Compute Engine quota at most its rate. A bucket is
// kept by the node's name, past its Node object's deletion, until it is
// full again (a full bucket is a new one): a node whose Node is deleted and
// created again finds its bucket as it left it. So the buckets held are
// those of nodes that asked within a refill, however large the fleet.

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
	// nextSweep is when full buckets are next dropped (sweep).
	nextSweep time.Time
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
	now := b.clock.Now()
	b.sweep(now)
	key := kind + "/" + node
	l, ok := b.buckets[key]
	if !ok {
		l = rate.NewLimiter(rate.Every(b.every), relayBurst)
		b.buckets[key] = l
	}
	r := l.ReserveN(now, 1)
	return r.DelayFrom(now), func() { r.CancelAt(b.clock.Now()) }
}

// forget drops node's buckets that are full (its Node is gone): one not
// full yet stays, as the Node may be created again, until a sweep finds
// it full.
func (b *relayBuckets) forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	for _, key := range []string{relayCall + "/" + node, relayRead + "/" + node} {
		if l, ok := b.buckets[key]; ok && l.TokensAt(now) >= relayBurst {
			delete(b.buckets, key)
		}
	}
	b.sweep(now)
}

// sweep drops every full bucket, at most once a refill (the time an empty
// bucket takes to fill): a pass over the buckets costs little, spread
// over that time. b.mu is held.
func (b *relayBuckets) sweep(now time.Time) {
	if now.Before(b.nextSweep) {
		return
	}
	b.nextSweep = now.Add(b.every * relayBurst)
	for key, l := range b.buckets {
		if l.TokensAt(now) >= relayBurst {
			delete(b.buckets, key)
		}
	}
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
