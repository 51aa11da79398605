package fleet

// The cluster autoscaler's node groups, as the decision reads them.

import (
	"sort"
	"strings"
)

// NodeGroupOf is the node group among groups that node is an instance of
// ("" for none): the group's name, as the last part of its URL and less a
// trailing "-grp", followed by "-" begins the node's name. The longest
// such group wins.
func NodeGroupOf(node string, groups []string) string {
	best, bestLen := "", 0
	for _, g := range groups {
		base := g[strings.LastIndex(g, "/")+1:]
		base = strings.TrimSuffix(base, "-grp")
		if base != "" && strings.HasPrefix(node, base+"-") && len(base) > bestLen {
			best, bestLen = g, len(base)
		}
	}
	return best
}

// groupNames lists the distinct node groups of nodes, sorted.
func groupNames(nodes []*Node) []string {
	var seen map[string]bool // read as empty while nil
	var out []string
	for _, n := range nodes {
		if n.AutoscalerGroup != "" && !seen[n.AutoscalerGroup] {
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[n.AutoscalerGroup] = true
			out = append(out, n.AutoscalerGroup)
		}
	}
	sort.Strings(out)
	return out
}
