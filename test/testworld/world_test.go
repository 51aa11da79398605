package testworld

import (
	"slices"
	"testing"
)

// TestAlphaAPIs: the EvictionRequest API is turned on from 1.37, the
// pods' scheduling groups from 1.35, and no older minor is given a gate
// it does not know.
func TestAlphaAPIs(t *testing.T) {
	for minor, want := range map[int]string{38: "GenericWorkload=true,EvictionRequestAPI=true", 37: "GenericWorkload=true,EvictionRequestAPI=true",
		36: "GenericWorkload=true", 35: "GenericWorkload=true", 34: "", 0: ""} {
		flags := alphaAPIs(minor)
		gates := ""
		if i := slices.Index(flags, "--feature-gates"); i >= 0 {
			gates = flags[i+1]
		}
		if gates != want || slices.Contains(flags, "lifecycle.k8s.io/v1alpha1=true") != (minor >= 37) {
			t.Errorf("alphaAPIs(%d) = %v, want the gates %q and EvictionRequests served from 37", minor, flags, want)
		}
	}
}
