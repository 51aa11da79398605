package manifests_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkEvictionCheck: what the eviction check adds to one eviction.
// The agent's token (bound to its pod) evicts pods of its node through the
// check, served from this process as a replica serves it; a service
// account bound to the same ClusterRole, which the check does not match,
// evicts the same way without it. Interleaved, one eviction at a time;
// prints the median of each and the difference.
func BenchmarkEvictionCheck(b *testing.B) {
	testworld.Need(b)
	const ns, node = "maintenance-handler", "bench-check-a"
	world.NodeT(b, testworld.NodeSpec{Name: node})
	world.WaitNamespaceGone(b, ns)
	apply(b, render(b, "base"))
	agent := agentPodOn(b, node)
	scaleAggregatorToZero(b)
	hostEvictionCheck(b, ns)

	ctx := testworld.Ctx(b, 10*time.Minute)
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "maintenance-handler-agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	checked, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		b.Fatal(err)
	}
	unchecked := sameRoleElsewhere(b, ns)

	wns := world.Namespace(b)
	lat := map[string][]time.Duration{}
	const perRound = 20
	for round := range max(3, b.N) {
		for _, who := range []struct {
			name string
			c    kubernetes.Interface
		}{{"checked", checked}, {"unchecked", unchecked}} {
			for i := range perRound {
				name := fmt.Sprintf("%s-%d-%d", who.name, round, i)
				podOn(b, wns, name, node)
				start := time.Now()
				err := evictAs(b, who.c, wns, name)
				if round == 0 && i == 0 && who.name == "checked" {
					// The API server may see the check's address a moment
					// after it was written.
					err = evictWhenServed(b, who.c, wns, name)
				}
				if err != nil {
					b.Fatalf("%s eviction of %s: %v", who.name, name, err)
				}
				lat[who.name] = append(lat[who.name], time.Since(start))
			}
		}
	}
	med := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	c, u := med(lat["checked"]), med(lat["unchecked"])
	b.ReportMetric(c, "ms/eviction-checked")
	b.ReportMetric(u, "ms/eviction-unchecked")
	b.ReportMetric(c-u, "ms-added-by-check")
}

// sameRoleElsewhere is a client of a service account bound to the agent's
// ClusterRole (a token bound to no pod: a pod runs as one service account),
// whose requests no policy and no webhook of the product match.
func sameRoleElsewhere(b *testing.B, ns string) kubernetes.Interface {
	b.Helper()
	ctx := testworld.Ctx(b, time.Minute)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-evictor"}}
	if _, err := world.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-evictor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "maintenance-handler-agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa.Name}}}
	if _, err := world.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = world.Client.RbacV1().ClusterRoleBindings().Delete(testworld.Ctx(b, 10*time.Second), crb.Name, metav1.DeleteOptions{})
	})
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		b.Fatal(err)
	}
	return c
}
