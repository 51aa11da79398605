package backoff

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestDelayGrowsAndIsBounded(t *testing.T) {
	p := Policy{Base: time.Second, Max: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 30 * time.Second, 1000: 30 * time.Second} {
		for range 50 {
			if d := p.Delay(n); d < want/2 || d > want {
				t.Errorf("Delay(%d) = %s, want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
	for range 50 {
		if d, want := (Policy{}).Delay(3), Default.Delay(3); d < 2*time.Second || d > 4*time.Second {
			t.Errorf("zero policy: Delay(3) = %s, want Default's (%s give or take jitter)", d, want)
		}
	}
}

func TestWaitOnTheInjectedClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), clk, time.Minute) }()
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	clk.Step(time.Minute)
	if err := <-done; err != nil {
		t.Errorf("after the delay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(ctx, clk, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("with the context ended: %v, want context.Canceled", err)
	}
}
