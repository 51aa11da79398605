package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// Google identities a node can reach on GKE, as the API server names them:
// its VM's Google service account (one of the project's, or the Compute
// Engine default one) and a Workload Identity principal of a pod bound to
// it.
const (
	nodeGSA     = "node-gsa@p.iam.gserviceaccount.com"
	defaultGSA  = "123456789-compute@developer.gserviceaccount.com"
	wiPrincipal = "principal://iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/p.svc.id.goog/subject/ns/gpu/sa/plugin"
)

// TestGoogleIdentityIsNoPerson: with the base applied, each Google
// identity a node can reach, given Node write by RBAC, is refused every key
// only a person (or the aggregator) sets, and their removal, on another
// node, and the refusal names it; a person's Google account is a person.
// Once admissionPolicy.people.googleIdentities names the node's service
// account, it sets them, and the identities it does not name are still
// refused.
func TestGoogleIdentityIsNoPerson(t *testing.T) {
	testworld.Need(t)
	b := world.NodeT(t, testworld.NodeSpec{Name: "google-b"})
	seedKeys(t, b.Name)
	apply(t, render(t, "base"))
	ctx := testworld.Ctx(t, 5*time.Minute)
	google := map[string]kubernetes.Interface{}
	for _, user := range []string{nodeGSA, defaultGSA, wiPrincipal} {
		google[user] = world.NodeWriterUser(t, user)
	}
	awaitRefused(t, google[nodeGSA], b.Name)
	forged := "true"
	keys := personKeys()
	if len(keys) < 10 {
		t.Fatalf("%d keys only a person sets: the table is broken", len(keys))
	}
	for user, c := range google {
		for _, k := range keys {
			if err := patchKey(ctx, c, b.Name, k, &forged); !refused(err) || !strings.Contains(err.Error(), user) {
				t.Errorf("%s setting the %s %s on %s: %v, want refused, naming it", user, k.Kind, k.Name, b.Name, err)
			}
			if k.Kind != protocol.Condition {
				if err := patchKey(ctx, c, b.Name, k, nil); !refused(err) {
					t.Errorf("%s removing the %s %s from %s: %v, want refused", user, k.Kind, k.Name, b.Name, err)
				}
			}
		}
	}
	trigger := protocol.Key{Name: protocol.LabelPerformMaintenance, Kind: protocol.Label}
	if err := patchKey(ctx, world.NodeWriterUser(t, "ops@example.com"), b.Name, trigger, &forged); err != nil {
		t.Errorf("a person's Google account setting %s on %s: %v, want allowed", trigger.Name, b.Name, err)
	}

	apply(t, writersPolicyOf(t, "--set", "admissionPolicy.people.googleIdentities={"+nodeGSA+"}"))
	// The policy takes the new list up a moment after it is written.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return patchKey(ctx, google[nodeGSA], b.Name, trigger, &forged) == nil, nil
	})
	if err != nil {
		t.Fatalf("the named %s setting %s on %s: never allowed", nodeGSA, trigger.Name, b.Name)
	}
	for _, k := range keys {
		if err := patchKey(ctx, google[nodeGSA], b.Name, k, &forged); err != nil {
			t.Errorf("the named %s setting the %s %s on %s: %v, want allowed", nodeGSA, k.Kind, k.Name, b.Name, err)
		}
		for _, user := range []string{defaultGSA, wiPrincipal} {
			if err := patchKey(ctx, google[user], b.Name, k, &forged); !refused(err) {
				t.Errorf("the unnamed %s setting the %s %s on %s: %v, want refused", user, k.Kind, k.Name, b.Name, err)
			}
		}
	}
}

// awaitRefused waits until the writers' policy is in force: c, which
// holds Node write, is refused the aggregator's VM facts on node.
func awaitRefused(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	forged := "forged"
	facts := protocol.Key{Name: protocol.AnnotationVMFacts, Kind: protocol.Annotation}
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return refused(patchKey(ctx, c, node, facts, &forged)), nil
	})
	if err != nil {
		t.Fatalf("the writers' policy never took effect: %v", err)
	}
}
