package aggregator

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// TestConditionCountsFromFirstSight: a condition back-dated by whoever
// wrote it counts from when the aggregator first saw it, and keeps that
// first sight while its status stays; a status turned is seen anew, and a
// condition written with a later transition keeps its own.
func TestConditionCountsFromFirstSight(t *testing.T) {
	t0 := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	yearAgo := t0.AddDate(-1, 0, 0)
	s := sightings{}
	node := func(status string, since time.Time) *fleet.Node {
		return &fleet.Node{Name: "n", Conditions: []fleet.Condition{{Type: "GPUUnhealthy", Status: status, Since: since}}}
	}
	for _, step := range []struct {
		name   string
		at     time.Time
		node   *fleet.Node
		wanted time.Time
	}{
		{name: "back-dated a year, first seen now", at: t0, node: node("True", yearAgo), wanted: t0},
		{name: "seen again later: its first sight", at: t0.Add(time.Hour), node: node("True", yearAgo), wanted: t0},
		{name: "turned False: seen anew", at: t0.Add(2 * time.Hour), node: node("False", yearAgo), wanted: t0.Add(2 * time.Hour)},
		{name: "True again, after its first sight as such was forgotten", at: t0.Add(3 * time.Hour), node: node("True", yearAgo), wanted: t0.Add(3 * time.Hour)},
		{name: "a later transition of its own", at: t0.Add(4 * time.Hour), node: node("True", t0.Add(3*time.Hour+time.Minute)), wanted: t0.Add(3*time.Hour + time.Minute)},
	} {
		s.see(step.node, step.at)
		if got := step.node.Conditions[0].Since; !got.Equal(step.wanted) {
			t.Errorf("%s: since %s, want %s", step.name, got, step.wanted)
		}
	}
	var f fleet.Fleet
	s.prune(&f)
	if d := cmp.Diff(sightings{}, s, cmp.AllowUnexported(sighting{})); d != "" {
		t.Errorf("after the node left the fleet (-want +got):\n%s", d)
	}
}
