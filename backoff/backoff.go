// Package backoff computes the delays between retries: exponential, bounded
// and jittered, so that many agents retrying after the same outage do not
// retry in step. It holds no state and is safe for concurrent use.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff with jitter.
type Policy struct {
	// Base is the delay after the first failure; Max bounds every delay.
	Base, Max time.Duration
}

// Delay is the wait after the n-th consecutive failure (n >= 1): Base
// doubled n-1 times, at most Max, of which up to half is taken off at
// random. It is within [d/2, d] for that d.
func (p Policy) Delay(n int) time.Duration {
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
