package kube_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

// TestRotatedTokenIsUsedAfterA401: a kubeconfig (or a pod's service
// account) names a token file the kubelet rotates. Once the old token is
// revoked, the first call refused with 401 makes the client read the file
// again: the next call goes through with the new token, not a minute
// later.
func TestRotatedTokenIsUsedAfterA401(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	ctx := testworld.Ctx(t, 2*time.Minute)
	ns := world.Namespace(t)
	admin := world.Client
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "agent"}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each token is bound to a Secret: deleting the Secret revokes it.
	token := func(secret string) string {
		s, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: s.Name, UID: s.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token("first")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(world.Config)
	cfg.BearerToken, cfg.BearerTokenFile = "", tokenFile
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testworld.WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	loaded, err := kube.Load(kubeconfig, "test", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(loaded)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer learns of the binding in a moment.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.GetConfigMap(ctx, ns, "policy")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("with the first token: %v", err)
	}

	// The kubelet rotates the token; the first is revoked.
	second := token("second")
	if err := os.WriteFile(tokenFile+".new", []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokenFile+".new", tokenFile); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Secrets(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server may take the first token a few seconds more (it
	// caches what it authenticated); then one call is refused, and the
	// next uses the second token.
	refused := 0
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.GetConfigMap(ctx, ns, "policy")
		switch {
		case apierrors.IsUnauthorized(err):
			refused++
			return false, nil
		case err != nil:
			return false, err
		}
		return refused > 0, nil
	})
	if err != nil {
		t.Fatalf("after the rotation: %d calls refused, then %v", refused, err)
	}
	if refused > 2 {
		t.Errorf("%d calls refused before the rotated token was used; want one (or two in flight)", refused)
	}
}

// faults is a transport between a client and the test world's API server
// that, on the test's word, refuses requests to a path as if the server
// were down, and cuts the watch under way.
type faults struct {
	next http.RoundTripper
	path string // the requests it acts on

	mu      sync.Mutex
	refuse  int // the next refuse requests; -1: every one
	expire  int // the next expire watches end at once, their version expired
	watches []*cutBody
	seen    chan request
}

// request is one request the faults saw: a list or a watch, when, and
// whether it was refused.
type request struct {
	watch           bool
	resourceVersion string
	at              time.Time
	refused         bool
}

func (f *faults) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != f.path {
		return f.next.RoundTrip(r)
	}
	q := r.URL.Query()
	seen := request{watch: q.Get("watch") == "true", resourceVersion: q.Get("resourceVersion"), at: time.Now()}
	f.mu.Lock()
	if f.refuse != 0 {
		if f.refuse > 0 {
			f.refuse--
		}
		f.mu.Unlock()
		seen.refused = true
		f.tell(seen)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	expire := seen.watch && f.expire > 0
	if expire {
		f.expire--
	}
	f.mu.Unlock()
	f.tell(seen)
	if expire {
		return expired(r), nil
	}
	resp, err := f.next.RoundTrip(r)
	if err != nil || !seen.watch {
		return resp, err
	}
	body := &cutBody{ReadCloser: resp.Body}
	f.mu.Lock()
	f.watches = append(f.watches, body)
	f.mu.Unlock()
	resp.Body = body
	return resp, nil
}

// tell hands r to the test; it never blocks a request.
func (f *faults) tell(r request) {
	select {
	case f.seen <- r:
	default:
	}
}

// expired is the API server's answer to a watch from a version it no
// longer has: a stream of one ERROR event, 410 Expired.
func expired(r *http.Request) *http.Response {
	const event = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"too old resource version: 1 (2)","reason":"Expired","code":410}}` + "\n"
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(event)), Request: r}
}

// set makes the next n requests refused (-1: every one, 0: none).
func (f *faults) set(n int) {
	f.mu.Lock()
	f.refuse = n
	f.mu.Unlock()
}

// cut ends every watch under way, as a dropped connection does.
func (f *faults) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.watches {
		b.cut()
	}
	f.watches = nil
}

// cutBody is a watch's body that ends when cut.
type cutBody struct {
	io.ReadCloser
	mu    sync.Mutex
	isCut bool
}

func (b *cutBody) cut() {
	b.mu.Lock()
	b.isCut = true
	b.mu.Unlock()
	_ = b.ReadCloser.Close()
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isCut {
		return 0, io.EOF
	}
	return n, err
}

// faulty is a client of ns's ConfigMaps through faults, and an informer
// of the ConfigMap named name.
func faulty(t *testing.T, ns, name string) (*faults, *kube.Informer) {
	t.Helper()
	f := &faults{path: "/api/v1/namespaces/" + ns + "/configmaps", seen: make(chan request, 256)}
	cfg := rest.CopyConfig(world.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { f.next = rt; return f })
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, kube.NewInformer(c.ConfigMapListWatch(ns, name), kube.InformerOptions{Name: "policy"})
}

// start runs inf until the test ends, and returns once it has synced.
func start(t *testing.T, inf *kube.Informer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// run runs inf until the test ends.
func run(t *testing.T, inf *kube.Informer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// until reads the faults' requests until one satisfies ok, and returns it.
func until(t *testing.T, f *faults, within time.Duration, ok func(request) bool) request {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case r := <-f.seen:
			if ok(r) {
				return r
			}
		case <-timeout:
			t.Fatalf("no such request within %s", within)
		}
	}
}

// TestExpiredWatchRelistsFromTheLastVersion: a watch whose version the API
// server no longer has (410 Expired: its watch cache moved on, as after a
// control-plane restart) is followed by a list from the last version the
// informer saw, which the watch cache answers, not by a consistent read
// that a thousand agents would make of etcd at once.
func TestExpiredWatchRelistsFromTheLastVersion(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, time.Minute)
	cm, err := world.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, inf := faulty(t, ns, "policy")
	start(t, inf)
	until(t, f, time.Minute, func(r request) bool { return r.watch })
	// The informer sees a change, so its last version is that write's.
	changed := make(chan struct{}, 4)
	inf.AddHandlers(kube.OnAnyChange(func() { changed <- struct{}{} }))
	<-changed // the handler's own sync
	cm.Data = map[string]string{"policy.yaml": "pools: {}"}
	if cm, err = world.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-changed

	f.mu.Lock()
	f.expire = 1
	f.mu.Unlock()
	f.cut()
	// The watch from the last version seen (the update's, or a later
	// bookmark's) expires; then the list (a watch that sends its initial
	// events, where the API server streams lists).
	last := until(t, f, time.Minute, func(r request) bool { return r.watch })
	// (The test world's versions are etcd's revisions: numbers.)
	if seen, err := strconv.ParseUint(last.resourceVersion, 10, 64); err != nil || seen < mustUint(t, cm.ResourceVersion) {
		t.Fatalf("watched again from version %q, before the update's %q", last.resourceVersion, cm.ResourceVersion)
	}
	relist := until(t, f, time.Minute, func(request) bool { return true })
	if relist.resourceVersion != last.resourceVersion {
		t.Errorf("after the watch expired, listed from version %q; want the last seen, %q (\"\" is a consistent read of etcd)", relist.resourceVersion, last.resourceVersion)
	}
}

// mustUint is the number v spells.
func mustUint(t *testing.T, v string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWatchBackoffStartsAgainWhenHealthy: the informer lists and watches
// again with client-go's backoff, 0.8 s doubling to 30 s; after two
// minutes healthy it starts again from 0.8 s, so one failure after a
// healthy spell costs about a second, not the 30 s of the failures before
// it (a control-plane upgrade fails every agent's watch a few times). It
// takes two minutes and some: client-go's clock is the real one.
func TestWatchBackoffStartsAgainWhenHealthy(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	ns := world.Namespace(t)
	ctx := testworld.Ctx(t, time.Minute)
	if _, err := world.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "policy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f, inf := faulty(t, ns, "policy")
	// Down: five refusals in a row, the backoff grown to 12.8 s or more.
	f.set(-1)
	run(t, inf)
	for range 5 {
		until(t, f, 2*time.Minute, func(r request) bool { return r.refused })
	}
	f.set(0)
	until(t, f, time.Minute, func(r request) bool { return r.watch && !r.refused })
	healthy := time.Now()
	// Healthy for client-go's two minutes, and a few seconds more.
	select {
	case r := <-f.seen:
		t.Fatalf("a request while the watch was healthy: %+v", r)
	case <-time.After(2*time.Minute + 5*time.Second):
	}
	// One failure: the watch is cut and its next start refused.
	f.set(1)
	f.cut()
	refused := until(t, f, time.Minute, func(r request) bool { return r.refused })
	next := until(t, f, time.Minute, func(r request) bool { return !r.refused })
	if wait := next.at.Sub(refused.at); wait > 2*time.Second {
		t.Errorf("after %s healthy, one failure was followed by a %s wait; want the backoff started again (under 2 s)", refused.at.Sub(healthy).Round(time.Second), wait.Round(time.Millisecond))
	}
}

// TestKubeconfigWithACredentialPlugin: a kubeconfig whose user is a
// credential plugin (exec, as GKE's gke-gcloud-auth-plugin is) is loaded
// as kubectl loads it: the plugin runs, and its token is used.
func TestKubeconfigWithACredentialPlugin(t *testing.T) {
	testworld.Need(t)
	t.Parallel()
	credential := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"` + world.Config.BearerToken + `"}}`
	kc := clientcmdapi.NewConfig()
	kc.Clusters["world"] = &clientcmdapi.Cluster{Server: world.Config.Host, CertificateAuthorityData: world.Config.CAData}
	kc.AuthInfos["plugin"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: "sh", Args: []string{"-c", "printf '%s' '" + credential + "'"},
		InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}}
	kc.Contexts["world"] = &clientcmdapi.Context{Cluster: "world", AuthInfo: "plugin"}
	kc.CurrentContext = "world"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	cfg, err := kube.Load(path, "test", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListNodes(testworld.Ctx(t, 30*time.Second), metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("with the plugin's token: %v", err)
	}
}
