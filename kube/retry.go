package kube

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// retryBackoff paces this package's retries (an informer's relist, an
// Event's write): apimachinery's exponential backoff with 0.5 s doubling
// to 15 s and each delay within [d, 2d), that is 1 s doubling to 30 s of
// which up to half is taken off at random, so that many agents retrying
// after the same outage do not retry in step.
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: 15 * time.Second}

// relistReset: an informer's backoff starts again from its first delay
// at a failure that comes this long or more after it last started again
// (apimachinery's backoff manager, as client-go's reflector uses it), so
// that a failure after months of failures here and there waits a
// second, not half a minute; an outage longer than this also starts
// again from a second.
const relistReset = 2 * time.Minute

// sleep waits d on clk, or until ctx ends (then it returns ctx's error).
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
