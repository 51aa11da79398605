package testworld

import (
	"slices"
	"testing"
)

// TestAlphaAPIs: the EvictionRequest API is turned on from 1.37, and no
// older minor is given a gate it does not know.
func TestAlphaAPIs(t *testing.T) {
	for version, on := range map[string]bool{"v1.37.2": true, "v1.38.0": true, "v1.36.3": false, "v1.34.4": false, "": false} {
		if got := slices.Contains(alphaAPIs(version), "EvictionRequestAPI=true"); got != on {
			t.Errorf("alphaAPIs(%q) turns EvictionRequests on: %t, want %t", version, got, on)
		}
	}
}
