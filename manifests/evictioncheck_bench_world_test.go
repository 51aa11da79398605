package manifests_test

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// BenchmarkEvictionCheck: what the eviction check adds to one eviction.
// The agent's token (bound to its pod) evicts pods of its node through the
// check, served from this process as a replica serves it; a service
// account bound to the same ClusterRole, which the check does not match,
// evicts the same way without it. Interleaved, one eviction at a time;
// prints the median of each and the difference; then the agent binary's
// drain of a 50-pod node with each.
func BenchmarkEvictionCheck(b *testing.B) {
	testworld.Need(b)
	const ns, node = "maintenance-handler", "bench-check-a"
	world.NodeT(b, testworld.NodeSpec{Name: node})
	apply(b, render(b, "base"))
	agent := agentPodOn(b, node)
	scaleAggregatorToZero(b)
	hostEvictionCheck(b, ns)

	checked, err := kubernetes.NewForConfig(world.ConfigForToken(agentToken(b, agent).Status.Token))
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

	// A whole drain: the agent binary drains a node of 50 pods for host
	// maintenance, once with its pod-bound token (every eviction through
	// the check) and once with the unchecked account of the same role;
	// from the notice to the node drained.
	drains := map[string][]time.Duration{}
	for round := range 2 {
		for _, who := range []string{"checked", "unchecked"} {
			drains[who] = append(drains[who], benchDrain(b, ns, fmt.Sprintf("bench-drain-%s-%d", who, round), who == "checked"))
		}
	}
	cd, ud := slices.Max(drains["checked"]), slices.Max(drains["unchecked"])
	b.ReportMetric(cd.Seconds(), "s/drain-checked")
	b.ReportMetric(ud.Seconds(), "s/drain-unchecked")
	fmt.Printf("eviction check: %.1f ms per eviction checked, %.1f unchecked (medians); a drain of 50 pods: %v checked, %v unchecked\n", c, u, drains["checked"], drains["unchecked"])
}

// benchDrain runs the agent binary on a new node of 50 pods (a 1 s grace
// each) with its pod-bound token (checked) or the unchecked account's,
// sets host maintenance, and returns how long until the node is drained.
func benchDrain(b *testing.B, ns, node string, checked bool) time.Duration {
	b.Helper()
	world.NodeT(b, testworld.NodeSpec{Name: node})
	agent := agentPodOn(b, node)
	var tr *authnv1.TokenRequest
	if checked {
		tr = agentToken(b, agent)
	} else {
		var err error
		if tr, err = world.Client.CoreV1().ServiceAccounts(ns).CreateToken(testworld.Ctx(b, 10*time.Second), "bench-evictor", &authnv1.TokenRequest{}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	wns := world.Namespace(b)
	one := int64(1)
	for i := range 50 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: wns, Name: fmt.Sprintf("w-%d", i)},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &one, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
		if _, err := world.Client.CoreV1().Pods(wns).Create(testworld.Ctx(b, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	v := agentVM(b, node, tr.Status.Token, "--node-name", node, "--pod-namespace", agent.Namespace, "--pod-name", agent.Name,
		"--policy-configmap", ns+"/maintenance-handler")
	world.WaitNode(b, node, "the agent's boot ID", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	start := time.Now()
	v.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(b, node, "terminating: drained", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	return time.Since(start)
}

// sameRoleElsewhere is a client of a service account bound to the agent's
// ClusterRole and Role (a token bound to no pod: a pod runs as one service
// account),
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
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench-evictor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "maintenance-handler-agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa.Name}}}
	if _, err := world.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
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
