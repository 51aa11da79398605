package testworld

import (
	"slices"
	"testing"
)

// TestAlphaAPIs: the EvictionRequest API is turned on from 1.37, and no
// older minor is given a gate it does not know.
func TestAlphaAPIs(t *testing.T) {
	for minor, on := range map[int]bool{37: true, 38: true, 36: false, 34: false, 0: false} {
		if got := slices.Contains(alphaAPIs(minor), "EvictionRequestAPI=true"); got != on {
			t.Errorf("alphaAPIs(%d) turns EvictionRequests on: %t, want %t", minor, got, on)
		}
	}
}
