package cli

// Which node a client address belongs to: every pod on a node has its own
// address from the node's pod range (Node.spec.podCIDRs), so a listener
// that bounds connections per address gives one node as many shares as it
// has pods. NodeRanges names the node, so that a listener keeps one share
// per node (Bounds.ShareOf).

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
)

// Pod ranges wider than these are not believed: a controller gives a node
// far fewer addresses (the controller-manager's node IPAM a /24 of IPv4
// and a /64 of IPv6 by default, its --node-cidr-mask-size; GKE sizes each
// node's range from its maximum Pods per node, a few hundred addresses:
// "Configure maximum Pods per node",
// cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr). A
// range a node wrote itself (where no controller assigns one) is so kept
// from naming a wide span of addresses its own.
const (
	widestIPv4Range = 16
	widestIPv6Range = 48
)

// NodeRanges indexes the nodes' pod ranges. An address belongs to a node
// where exactly one node's range holds it: an address two nodes' ranges
// hold (overlapping ranges, which no controller assigns) belongs to
// neither, and keeps a share of its own.
//
// The ranges come from Node.spec.podCIDRs, which the API server lets be
// set once and never changed (ValidateNodeUpdate), and which the
// controller-manager's node IPAM (or the cloud's allocator, GKE's) sets
// when the Node registers. The node's own address (status.addresses,
// which the kubelet writes) is not indexed: a node could name any address
// there, the API server's among them; its own address keeps the share of
// one address.
//
// It is safe for concurrent use: Set and Delete from a Node watch's
// handlers, NodeOf from the listeners' Accept.
type NodeRanges struct {
	mu sync.RWMutex
	// byNode are each node's ranges, as last set.
	byNode map[string][]netip.Prefix
	// owners are the nodes of each range (more than one: overlapping).
	owners map[netip.Prefix][]string
	// bits are the prefix lengths indexed, longest first.
	bits []int
}

// Set records node's pod ranges (Node.spec.podCIDRs), replacing those it
// had; a range that cannot be parsed, or is wider than a node is given, is
// left out.
func (r *NodeRanges) Set(node string, podCIDRs []string) {
	var ranges []netip.Prefix
	for _, s := range podCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4() && p.Bits() < widestIPv4Range || p.Addr().Is6() && p.Bits() < widestIPv6Range {
			continue
		}
		ranges = append(ranges, p.Masked())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Equal(r.byNode[node], ranges) {
		return
	}
	r.remove(node)
	if len(ranges) == 0 {
		return
	}
	if r.byNode == nil {
		r.byNode, r.owners = map[string][]netip.Prefix{}, map[netip.Prefix][]string{}
	}
	r.byNode[node] = ranges
	for _, p := range ranges {
		r.owners[p] = append(r.owners[p], node)
		if !slices.Contains(r.bits, p.Bits()) {
			r.bits = append(r.bits, p.Bits())
			slices.SortFunc(r.bits, func(a, b int) int { return cmp.Compare(b, a) })
		}
	}
}

// Delete forgets node's ranges.
func (r *NodeRanges) Delete(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.remove(node)
}

func (r *NodeRanges) remove(node string) {
	for _, p := range r.byNode[node] {
		owners := slices.DeleteFunc(r.owners[p], func(n string) bool { return n == node })
		if len(owners) == 0 {
			delete(r.owners, p)
		} else {
			r.owners[p] = owners
		}
	}
	delete(r.byNode, node)
}

// NodeOf is the node whose pod range holds addr, "" for none (or for more
// than one).
func (r *NodeRanges) NodeOf(addr netip.Addr) string {
	addr = addr.Unmap()
	r.mu.RLock()
	defer r.mu.RUnlock()
	node := ""
	for _, bits := range r.bits {
		if bits > addr.BitLen() {
			continue
		}
		p, err := addr.Prefix(bits)
		if err != nil {
			continue
		}
		switch owners := r.owners[p]; {
		case len(owners) > 1, len(owners) == 1 && node != "" && node != owners[0]:
			return ""
		case len(owners) == 1:
			node = owners[0]
		}
	}
	return node
}

// Default pod ranges: the controller-manager's node IPAM gives each node a
// /24 of IPv4 and a /64 of IPv6 by default (its --node-cidr-mask-size),
// and GKE a /24 for its default of 110 Pods per node ("Configure maximum
// Pods per node", cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr).
const (
	defaultIPv4Range = 24
	defaultIPv6Range = 64
)

// RangeShare names the default-sized pod range that holds addr (a /24 of
// IPv4, a /64 of IPv6), for a listener that knows no node's range
// (Bounds.ShareOf): one node's pods then share one share. Where nodes are
// given smaller ranges, the few nodes of one /24 share one share: a
// scraper beside a node that fills it waits for its connections.
func RangeShare(addr netip.Addr) string {
	bits := defaultIPv6Range
	if addr.Unmap().Is4() {
		addr, bits = addr.Unmap(), defaultIPv4Range
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return ""
	}
	return "range " + p.String()
}
