package backoff

import (
	"testing"
	"time"
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
	if d := (Policy{}).Delay(3); d != 0 {
		t.Errorf("zero policy: %s, want 0", d)
	}
}
