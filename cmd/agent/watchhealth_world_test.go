package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestHealthzSaysWhichWatchFails: an agent whose identity may read and
// write its Node but not list its pods cannot drain anything. Its
// /healthz answers 503 once the pods' watch has failed for
// --unhealthy-after, naming the watch and the API server's refusal, and
// its metrics say the watch is unhealthy; once the permission is granted,
// the watch lists and /healthz answers 200 again.
func TestHealthzSaysWhichWatchFails(t *testing.T) {
	testworld.Need(t)
	const node = "bin-watch-0"
	world.NodeT(t, testworld.NodeSpec{Name: node})
	emu := gceemu.StartT(t, gceemu.Config{Name: node})
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, 2*time.Minute)
	if _, err := world.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grant := func(name string, rules ...rbacv1.PolicyRule) {
		t.Helper()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "agent"}},
		}
		if _, err := world.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := world.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = world.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = world.Client.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	grant(ns+"-node",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}})
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(world.Config)
	cfg.BearerToken = tr.Status.Token
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testworld.WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	p := runAgent(t, node, emu, "--kubeconfig", kubeconfig, "--metadata-timeout", "1s", "--unhealthy-after", "12s")

	var code int
	var body string
	poll(t, "/healthz says the pods' watch fails", time.Minute, func() bool {
		code, body = p.get("/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the pods watch has failed for")
	})
	if !strings.Contains(body, "forbidden") {
		t.Errorf("/healthz says %q; want the API server's refusal", body)
	}
	if _, metrics := p.get("/metrics"); !strings.Contains(metrics, `maintenance_handler_agent_watch_healthy{node_name="`+node+`",node_pool_name="default-pool",watch="pods"} 0`) {
		t.Errorf("the metrics do not say the pods' watch is unhealthy:\n%s", grepLines(metrics, "watch_"))
	}

	grant(ns+"-pods", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}})
	poll(t, "/healthz healthy once the pods are listed", time.Minute, func() bool {
		code, body = p.get("/healthz")
		return code == http.StatusOK
	})
}

// grepLines is the lines of text that contain part.
func grepLines(text, part string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, part) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
