package testworld_test

import (
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestHostileNodeIdentities: the three identities of one node are who the
// API server says they are: the shipped agent account and a node-writer
// account, each with the node-name claim of that node, and its kubelet.
func TestHostileNodeIdentities(t *testing.T) {
	testworld.Need(t)
	n := node(t, testworld.NodeSpec{Name: "hostile-a"})
	h := world.HostileNode(t, n.Name)
	ctx := testworld.Ctx(t, time.Minute)
	for _, c := range []struct {
		name     string
		client   kubernetes.Interface
		user     string
		nodeName bool
	}{
		{"agent", h.Agent, "system:serviceaccount:" + testworld.ShippedAgentNamespace + ":" + testworld.AgentIdentity, true},
		{"kubelet", h.Kubelet, "system:node:" + n.Name, false},
		{"daemonset", h.DaemonSet, h.DaemonSetUser, true},
	} {
		r, err := c.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: who am I: %v", c.name, err)
		}
		u := r.Status.UserInfo
		if u.Username != c.user {
			t.Errorf("%s is %q, want %q", c.name, u.Username, c.user)
		}
		if got := u.Extra["authentication.kubernetes.io/node-name"]; c.nodeName && (len(got) != 1 || got[0] != n.Name) {
			t.Errorf("%s's node-name claim is %v, want [%s]", c.name, got, n.Name)
		}
	}
	// The node writer writes Nodes (what the fences are to stop).
	got, err := h.DaemonSet.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Labels["example.com/probe"] = "x"
	if _, err := h.DaemonSet.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the node writer may not update a Node: %v", err)
	}
}
