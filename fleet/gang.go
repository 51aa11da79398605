package fleet

// Gangs: the nodes that run the pods of one pod group are maintained as
// one unit (protocol.GroupGang), once the aggregator has found every
// node's word about its pod groups true.

import (
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// GangLabels is the gang label each of nodes must carry, by name ("" for
// none), for every node that lists pod groups or carries a label. Of each
// node's pod groups (Node.PodGroups) only those verified says are true
// count (the aggregator read the pod: it is on that node, in that group);
// one whose pod is not read yet (read false: the read failed) counts as it
// was, true on a node in a gang, so that an API server's hiccup does not
// break a gang up, and false elsewhere.
// Nodes that share a pod group are one gang, and so are nodes linked
// through several (a node in two pod groups joins both); a gang of two
// nodes or more is named after its first pod group (protocol.GangName).
// A multi-host slice's host is in its slice, never a gang. While a gang is
// down (a node carrying its label is in a maintenance, or asked to drain
// with it), its nodes keep the label they carry and no node joins it: its
// drain takes its pods away, and it must hold until it is back.
func GangLabels(nodes iter.Seq[*Node], verified func(node string, c protocol.PodGroupClaim) (ok, read bool)) map[string]string {
	byGroup := map[string][]string{} // pod group -> its nodes
	current := map[string]string{}   // node -> the label it carries
	down := map[string]bool{}        // gangs down
	for n := range nodes {
		current[n.Name] = n.Gang
		if n.Gang != "" && (n.Phase != "" && n.Phase != protocol.PhaseIdle || n.Ask != nil) {
			down[n.Gang] = true
		}
		if n.GroupKind == protocol.GroupSlice {
			continue
		}
		for _, c := range n.PodGroups {
			if ok, read := verified(n.Name, c); ok || !read && n.Gang != "" {
				byGroup[c.Group()] = append(byGroup[c.Group()], n.Name)
			}
		}
	}
	want := gangs(byGroup)
	out := make(map[string]string, len(current))
	for name, was := range current {
		switch is := want[name]; {
		case down[was]:
			out[name] = was
		case down[is]:
			out[name] = ""
		default:
			out[name] = is
		}
	}
	return out
}

// gangs names the gang of each node of byGroup's that shares a pod group,
// directly or through others, with another node.
func gangs(byGroup map[string][]string) map[string]string {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		parent[x] = x
		return x
	}
	groups := slices.Sorted(maps.Keys(byGroup))
	for _, g := range groups {
		first := find(byGroup[g][0])
		for _, n := range byGroup[g][1:] {
			if r := find(n); r != first {
				parent[r] = first
			}
		}
	}
	size := map[string]int{}
	for n := range parent {
		size[find(n)]++
	}
	named := map[string]string{} // root -> the gang's name, its first pod group's
	for _, g := range groups {
		root := find(byGroup[g][0])
		if _, ok := named[root]; !ok && size[root] > 1 {
			ns, pg, _ := strings.Cut(g, "/")
			named[root] = protocol.GangName(ns, pg)
		}
	}
	out := map[string]string{}
	for n := range parent {
		if name := named[find(n)]; name != "" {
			out[n] = name
		}
	}
	return out
}

// Gangs are the nodes GangLabels looks at: those that list pod groups or
// carry a gang's label.
func (f *Fleet) Gangs() iter.Seq[*Node] { return f.Marked(markGang) }
