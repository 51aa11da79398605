package protocol

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEveryConditionTheAgentWritesIsAKey: the conditions the agent keeps
// on its Node are in Keys, written by the agent, and fenced as its keys.
func TestEveryConditionTheAgentWritesIsAKey(t *testing.T) {
	for _, c := range AgentConditionTypes {
		i := slices.IndexFunc(Keys, func(k Key) bool { return k.Name == string(c) })
		if i < 0 {
			t.Errorf("the agent's condition %s is not in Keys", c)
			continue
		}
		if k := Keys[i]; k.Kind != Condition || k.Writer != Agent {
			t.Errorf("%s: %s written by %s, want a condition written by the agent", c, k.Kind, k.Writer)
		}
	}
}

// TestWhoMaySetAndRemove: each key's fence names its writer (and those who
// may request it, or register with it), and no identity a node holds but
// the writer's; removal adds the consumer, a person and the uninstall Job.
func TestWhoMaySetAndRemove(t *testing.T) {
	for _, tc := range []struct {
		key            string
		set, removable []Who
	}{
		{AnnotationPhase, []Who{WhoAgent}, []Who{WhoAgent, WhoPerson, WhoUninstall}},
		{string(ConditionDrained), []Who{WhoAgent}, []Who{WhoAgent, WhoPerson, WhoUninstall}},
		{AnnotationVMFacts, []Who{WhoAggregator}, []Who{WhoAggregator, WhoPerson, WhoUninstall}},
		{AnnotationFaultRepair, []Who{WhoAggregator}, []Who{WhoAgent, WhoAggregator, WhoPerson, WhoUninstall}},
		{LabelPerformMaintenance, []Who{WhoAggregator, WhoPerson}, []Who{WhoAgent, WhoAggregator, WhoPerson, WhoUninstall}},
		{LabelReportFaulty, []Who{WhoAggregator, WhoPerson}, []Who{WhoAgent, WhoAggregator, WhoPerson, WhoUninstall}},
		{TaintFaulty, []Who{WhoAggregator}, []Who{WhoAggregator, WhoPerson, WhoUninstall}},
		{LabelOpportunisticDisable, []Who{WhoPerson}, []Who{WhoPerson, WhoUninstall}},
		{LabelHealthPrediction, []Who{WhoPerson}, []Who{WhoPerson, WhoUninstall}},
		{LabelTopologySubblock, []Who{WhoPerson, WhoRegistration}, []Who{WhoPerson, WhoUninstall}},
		{LabelTerminatesOnHostMaintenance, []Who{WhoPerson, WhoRegistration}, []Who{WhoPerson, WhoUninstall}},
		{LabelActiveMaintenance, []Who{WhoOwnNode, WhoPerson}, []Who{WhoOwnNode, WhoPerson, WhoUninstall}},
		{TaintToBeDeleted, []Who{WhoAnyone}, []Who{WhoAnyone, WhoPerson, WhoUninstall}},
	} {
		i := slices.IndexFunc(Keys, func(k Key) bool { return k.Name == tc.key })
		if i < 0 {
			t.Errorf("%s is not in Keys", tc.key)
			continue
		}
		if diff := cmp.Diff(tc.set, Keys[i].Setters()); diff != "" {
			t.Errorf("%s: who may set it (-want +got):\n%s", tc.key, diff)
		}
		if diff := cmp.Diff(tc.removable, Keys[i].Removers()); diff != "" {
			t.Errorf("%s: who may remove it (-want +got):\n%s", tc.key, diff)
		}
	}
}

// TestNoNodeIdentitySetsAnotherNodesKey: on a Node, only keys shared with
// GKE's handler may be set by any identity of that node; every other key
// is the writer's alone among the identities a node holds (the agent's,
// for its keys), and registration sets only labels.
func TestNoNodeIdentitySetsAnotherNodesKey(t *testing.T) {
	for _, k := range NodeKeys() {
		set := k.Setters()
		if slices.Contains(set, WhoOwnNode) != k.SharedWithGKE {
			t.Errorf("%s: any identity of its node may set it: %t, want %t (shared with GKE's handler)", k.Name, !k.SharedWithGKE, k.SharedWithGKE)
		}
		if slices.Contains(set, WhoAgent) && k.Writer != Agent {
			t.Errorf("%s: the agent may set it, but %s writes it", k.Name, k.Writer)
		}
		if slices.Contains(set, WhoAnyone) != (k.Writer == Autoscaler) {
			t.Errorf("%s: anyone may set it: %t, want only the autoscaler's taint so", k.Name, !(k.Writer == Autoscaler))
		}
		if slices.Contains(set, WhoRegistration) && k.Kind != Label {
			t.Errorf("%s: a %s set at registration; only labels are", k.Name, k.Kind)
		}
	}
}
