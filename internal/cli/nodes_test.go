package cli

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNodeRanges: an address belongs to the one node whose pod range holds
// it; one in no range, or in the ranges of two nodes, belongs to none; a
// range wider than a node is given, or unreadable, is not believed; a
// node's ranges changed or deleted are forgotten.
func TestNodeRanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes map[string][]string
		// then, after the nodes are set: deleted nodes.
		deleted []string
		want    map[string]string // address -> its node
	}{
		{
			name:  "each address to the node whose range holds it",
			nodes: map[string][]string{"a": {"10.4.1.0/24"}, "b": {"10.4.2.0/24", "fd00:4:2::/64"}},
			want: map[string]string{
				"10.4.1.7": "a", "10.4.1.255": "a", "10.4.2.9": "b", "fd00:4:2::9": "b", "::ffff:10.4.1.7": "a",
				"10.4.3.1": "", "10.0.0.2": "", "172.16.0.2": "",
			},
		},
		{
			name:  "ranges of different sizes",
			nodes: map[string][]string{"a": {"10.4.0.0/23"}, "b": {"10.4.2.0/26"}},
			want:  map[string]string{"10.4.1.200": "a", "10.4.0.1": "a", "10.4.2.63": "b", "10.4.2.64": ""},
		},
		{
			name:  "an address two nodes' ranges hold belongs to neither",
			nodes: map[string][]string{"a": {"10.4.1.0/24"}, "b": {"10.4.1.0/24"}, "c": {"10.4.2.0/24"}, "wide": {"10.4.0.0/20"}},
			want:  map[string]string{"10.4.1.7": "", "10.4.2.7": "", "10.4.3.7": "wide"},
		},
		{
			name:  "a range wider than a node is given, or unreadable, is not believed",
			nodes: map[string][]string{"v4": {"10.0.0.0/8"}, "v6": {"fd00::/32"}, "bad": {"10.4.1.0"}, "ok": {"10.5.0.0/16"}},
			want:  map[string]string{"10.4.1.0": "", "10.9.9.9": "", "fd00::1": "", "10.5.200.1": "ok"},
		},
		{
			name:    "a deleted node's range is forgotten",
			nodes:   map[string][]string{"a": {"10.4.1.0/24"}, "b": {"10.4.1.0/24"}, "c": {"10.4.2.0/24"}},
			deleted: []string{"b", "c"},
			want:    map[string]string{"10.4.1.7": "a", "10.4.2.7": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r NodeRanges
			for node, ranges := range tc.nodes {
				r.Set(node, ranges)
			}
			for _, node := range tc.deleted {
				r.Delete(node)
			}
			got := map[string]string{}
			for a := range tc.want {
				got[a] = r.NodeOf(netip.MustParseAddr(a))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("node of each address (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodeRangesChanged: a node set again holds its new ranges only, and
// one set with none holds none.
func TestNodeRangesChanged(t *testing.T) {
	var r NodeRanges
	r.Set("a", []string{"10.4.1.0/24"})
	r.Set("a", []string{"10.4.9.0/24"})
	r.Set("b", []string{"10.4.2.0/24"})
	r.Set("b", nil)
	got := []string{r.NodeOf(netip.MustParseAddr("10.4.1.1")), r.NodeOf(netip.MustParseAddr("10.4.9.1")), r.NodeOf(netip.MustParseAddr("10.4.2.1"))}
	if diff := cmp.Diff([]string{"", "a", ""}, got); diff != "" {
		t.Errorf("nodes of 10.4.1.1, 10.4.9.1, 10.4.2.1 (-want +got):\n%s", diff)
	}
}
