package main

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNodeSharesKeepTheReplicasNodeApart: on the replica's listeners the
// pods of every other node share their node's share, and those of the
// replica's own node (whence the kubelet probes it) keep one an address.
func TestNodeSharesKeepTheReplicasNodeApart(t *testing.T) {
	ranges, shareOf := nodeShares(&Options{NodeName: "system-1"})
	ranges.Set("system-1", []string{"10.4.1.0/24"})
	ranges.Set("gpu-7", []string{"10.4.2.0/24"})
	got := map[string]string{}
	for _, a := range []string{"10.4.1.1", "10.4.1.9", "10.4.2.1", "10.4.2.9", "172.16.0.2"} {
		got[a] = shareOf(netip.MustParseAddr(a))
	}
	want := map[string]string{"10.4.1.1": "", "10.4.1.9": "", "10.4.2.1": "gpu-7", "10.4.2.9": "gpu-7", "172.16.0.2": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("share of each address, \"\" its own (-want +got):\n%s", diff)
	}
}
