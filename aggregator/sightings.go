package aggregator

// When the aggregator first saw each fault detector's condition: how long
// a condition has held is counted from its last transition, as its
// detector wrote it, but never from before the aggregator first saw it in
// that status. A detector whose token a node holds (its agent's own
// device health condition, or node-problem-detector's, which runs on every
// node) could back-date the transition and have the node's repair
// approved at once, ahead of the faults that waited; it cannot move when
// the aggregator first saw it. A new leader counts from its own first
// sight: a repair waits at most the condition's duration once more.

import (
	"time"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// sightings are, by node, when this replica first saw each of its
// detectors' conditions in its present status (by type and status). The
// pass's goroutine owns them.
type sightings map[string]map[sighting]time.Time

// sighting is one condition's type and status.
type sighting struct{ typ, status string }

// see moves each of v's conditions' Since to no earlier than when it was
// first seen in its status (now, for one not seen before), and records v's
// conditions as they are: the work is linear in their number, however many
// a node writes.
func (s sightings) see(v *fleet.Node, now time.Time) {
	prev := s[v.Name]
	next := make(map[sighting]time.Time, len(v.Conditions))
	for i := range v.Conditions {
		c := &v.Conditions[i]
		key := sighting{typ: c.Type, status: c.Status}
		at, ok := prev[key]
		if !ok {
			at = now
		}
		if c.Since.Before(at) {
			c.Since = at
		}
		next[key] = at
	}
	if len(next) == 0 {
		delete(s, v.Name)
		return
	}
	s[v.Name] = next
}

// prune forgets the nodes no longer in f, once more nodes are held than f
// has (a Node deleted with its conditions on is otherwise held for ever).
func (s sightings) prune(f *fleet.Fleet) {
	if len(s) <= f.Len() {
		return
	}
	for name := range s {
		if f.Node(name) == nil {
			delete(s, name)
		}
	}
}
