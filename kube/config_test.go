package kube

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// apiServer answers GET of the Node "n1" to a request with the bearer
// token; it records the user agent.
func apiServer(t *testing.T, token string) (*httptest.Server, []byte, chan string) {
	t.Helper()
	agents := make(chan string, 4)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent()
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonUnauthorized, Code: 401})
			return
		}
		if r.URL.Path != "/api/v1/nodes/n1" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7"}})
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, ca, agents
}

func getNode(t *testing.T, cfg Config) (*corev1.Node, error) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.GetNode(context.Background(), "n1")
}

// TestLoadKubeconfig: the current context's server, CA (a file relative to
// the kubeconfig) and token reach the API server, and the server is
// verified; a credential plugin is refused, saying so.
func TestLoadKubeconfig(t *testing.T) {
	srv, ca, agents := apiServer(t, "s3cret")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	caLine := "    certificate-authority: ca.pem\n"
	write := func(user string) string {
		path := filepath.Join(dir, "kubeconfig")
		kc := `apiVersion: v1
kind: Config
current-context: here
contexts:
- name: elsewhere
  context: {cluster: other, user: admin}
- name: here
  context: {cluster: test, user: admin}
clusters:
- name: other
  cluster: {server: "https://192.0.2.1"}
- name: test
  cluster:
    server: ` + srv.URL + `
` + caLine + `users:
- name: admin
  user:
` + user
		if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg, err := Load(write("    token: s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = "agent/test"
	n, err := getNode(t, cfg)
	if err != nil || n.ResourceVersion != "7" {
		t.Fatalf("GET with the kubeconfig: %v, %v", n, err)
	}
	if ua := <-agents; ua != "agent/test" {
		t.Errorf("user agent %q", ua)
	}

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load(write("    tokenFile: token\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getNode(t, cfg); err != nil {
		t.Errorf("GET with a token file: %v", err)
	}

	cfg, err = Load(write("    token: wrong\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getNode(t, cfg); !apierrors.IsUnauthorized(err) {
		t.Errorf("GET with a wrong token: %v, want Unauthorized", err)
	}

	_, err = Load(write("    exec: {command: gke-gcloud-auth-plugin, apiVersion: client.authentication.k8s.io/v1beta1}\n"))
	if err == nil || !strings.Contains(err.Error(), "credential plugins") {
		t.Errorf("an exec plugin: %v, want refused", err)
	}

	// No CA: the system's roots do not trust the server.
	caLine = ""
	cfg, err = Load(write("    token: s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getNode(t, cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET from a server of another CA: %v, want a certificate error", err)
	}
}

// TestInCluster: a pod's service account files and the service's address.
func TestInCluster(t *testing.T) {
	srv, ca, _ := apiServer(t, "pod-token")
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": ca, "token": []byte("pod-token")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := InCluster(dir, host, port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getNode(t, cfg); err != nil {
		t.Errorf("GET in cluster: %v", err)
	}
	if _, err := InCluster(dir, "", ""); err == nil || !strings.Contains(err.Error(), "not in a cluster") {
		t.Errorf("outside a cluster: %v", err)
	}
}

// TestTokenFileReadAgain: a pod's token, rotated in place by the kubelet,
// is read again after a minute, and the last one is kept while the file
// cannot be read.
func TestTokenFileReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC))
	f := &fileToken{path: path, clock: clk}
	want := func(tok string) {
		t.Helper()
		if got, err := f.token(); err != nil || got != tok {
			t.Errorf("token %q, %v; want %q", got, err, tok)
		}
	}
	write("first")
	want("first")
	write("second")
	clk.Step(30 * time.Second)
	want("first")
	clk.Step(31 * time.Second)
	want("second")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	want("second")
}
