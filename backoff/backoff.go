// Package backoff computes the delays between retries: exponential, bounded
// and jittered, so that many agents retrying after the same outage do not
// retry in step. It holds no state and is safe for concurrent use.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// Default is the policy of every retry loop in the project: 1 s doubling
// to 30 s.
var Default = Policy{Base: time.Second, Max: 30 * time.Second}

// Policy is exponential backoff with jitter. The zero Policy is Default.
type Policy struct {
	// Base is the delay after the first failure; Max bounds every delay.
	Base, Max time.Duration
}

// Delay is the wait after the n-th consecutive failure (n >= 1): Base
// doubled n-1 times, at most Max, of which up to half is taken off at
// random. It is within [d/2, d] for that d.
func (p Policy) Delay(n int) time.Duration {
	if p == (Policy{}) {
		p = Default
	}
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Wait waits d on clk, or until ctx ends (then it returns ctx's error): the
// pause between two attempts of every retry loop, on an injected clock.
func Wait(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
