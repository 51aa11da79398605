package testworld

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"crypto/tls"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Controllers run by kube-controller-manager: everything the project's
// behaviour depends on (PDB status, garbage collection, namespaces, service
// accounts and their tokens, workloads, node readiness and pod GC).
var Controllers = []string{
	"disruption", "garbagecollector", "namespace", "serviceaccount", "serviceaccount-token",
	"replicaset", "deployment", "daemonset", "statefulset", "job", "nodelifecycle", "podgc",
	// kube-root-ca.crt in every namespace: a real node's pods mount it with
	// their service-account token.
	"root-ca-cert-publisher",
	// A Service's endpoints: the API server calls an admission webhook
	// (the eviction check) at its Service's endpoints (below).
	"endpoint", "endpointslice",
	// Quotas' usage, as every cluster counts it: GKE limits the critical
	// priority classes to namespaces with a quota for them (gke.go).
	"resourcequota",
}

// Annotation kwok manages nodes by; AddNode sets it.
const (
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	KwokNodeValue      = "fake"
	// PodDeleteDelayAnnotation makes kwok remove a deleted pod after this
	// duration (e.g. "20s"; default 1 s), never later than its
	// deletionTimestamp. A delay shorter than the grace period is stretched
	// by a random jitter up to the deletionTimestamp; a delay equal to the
	// grace period makes a pod that takes its whole grace to stop (to the
	// second: deletionTimestamp has whole-second precision).
	PodDeleteDelayAnnotation = "pod-delete.stage.kwok.x-k8s.io/delay"
)

// Options configure Start.
type Options struct {
	// Dir is the built world (see Dir and Build); empty means Dir().
	Dir string
	// Progress receives one line per start-up step; nil discards.
	Progress io.Writer
	// KeepDir keeps the world's temp directory (logs, kubeconfig) after Stop.
	KeepDir bool
	// NodeMonitorGracePeriod, when set, is how long the node lifecycle
	// controller waits for a node's heartbeat, and for a new node's first,
	// before it marks the node NotReady (its defaults, 50 s and 1 min, are
	// too short for kwok heart-beating 20,000 nodes on two cores).
	NodeMonitorGracePeriod time.Duration
	// ControllerQPS, when set, is kube-controller-manager's rate of API
	// requests (burst twice that); its default, 20 a second, takes minutes
	// to lift the not-ready taint from thousands of new nodes.
	ControllerQPS int
	// NodeMonitorPeriod, when set, is how often the node lifecycle
	// controller looks at every node's health (with its default, 5 s, the
	// controller manager took 20 s of CPU in 63 s at 65,000 nodes: in a
	// cluster the control plane's machines' work, here that of the two
	// cores a benchmark times the aggregator on).
	NodeMonitorPeriod time.Duration
}

// World is one running control plane with kwok. Fields are read-only.
type World struct {
	// Config is an admin rest.Config (system:masters).
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// TempDir holds the world's data, logs and kubeconfig.
	TempDir string
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string
	// StartupTime is how long Start took.
	StartupTime time.Duration

	keepDir bool
	pki     *pki
	procs   []*proc // in start order
	mu      sync.Mutex
	stopped bool

	// The shipped identities, installed by the first test that needs one.
	shippedOnce sync.Once
	shippedErr  error
}

// ownStages are the test world's own kwok Stages (stages/), beside those
// kwok ships.
//
//go:embed stages/*.yaml
var ownStages embed.FS

// adminToken is the static token of the admin user in every world.
const adminToken = "testworld-admin-token"

// WebhookCaller is the user the world's API server is to the webhooks it
// calls: it presents a static token of that user to every webhook (its
// admission configuration's kubeconfig for webhooks), as a self-managed
// cluster can be set to, so that a webhook may admit the API server alone.
const WebhookCaller = "kube-apiserver-webhook-client"

const webhookCallerToken = "testworld-webhook-caller-token"

// writeWebhookAuth writes, in dir, the API server's admission
// configuration that presents webhookCallerToken to every webhook and
// limits the critical priority classes as GKE does (gke.go), and returns
// its path.
func writeWebhookAuth(dir string) (string, error) {
	kubeconfig := filepath.Join(dir, "webhook-kubeconfig.yaml")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nusers:\n  - name: \"*\"\n    user:\n      token: "+webhookCallerToken+"\n"), 0o600); err != nil {
		return "", err
	}
	config := filepath.Join(dir, "admission-config.yaml")
	plugin := func(name string) string {
		return "  - name: " + name + "\n    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n      kind: WebhookAdmissionConfiguration\n      kubeConfigFile: " + kubeconfig + "\n"
	}
	data := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" + plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook") + criticalPodsLimited
	return config, os.WriteFile(config, []byte(data), 0o600)
}

// Start runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok on free loopback ports in a new temp directory and waits until
// each is ready. On error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (w *World, err error) {
	begin := time.Now()
	dir := opts.Dir
	if dir == "" {
		if dir, err = Dir(); err != nil {
			return nil, err
		}
	}
	if !Built(dir) {
		return nil, ErrNotBuilt
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	tmp, err := os.MkdirTemp("", "testworld-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	w = &World{TempDir: tmp, keepDir: opts.KeepDir}
	defer func() {
		if err != nil {
			_ = w.Stop()
		}
	}()
	bin := func(name string) string { return filepath.Join(dir, "bin", name) }
	logs := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return w, err
	}
	logPath := func(name string) string { return filepath.Join(logs, name+".log") }

	p, err := newPKI(tmp)
	if err != nil {
		return w, fmt.Errorf("make certificates: %w", err)
	}
	w.pki = p
	ports, err := freePorts(6)
	if err != nil {
		return w, err
	}
	etcdPort, etcdPeerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	etcd, err := w.start("etcd", logPath("etcd"), bin(binEtcd),
		"--data-dir", filepath.Join(tmp, "etcd"),
		"--listen-client-urls", etcdURL,
		"--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", etcdPeerPort),
		"--name", "default",
		"--unsafe-no-fsync",
		"--log-level", "warn",
	)
	if err != nil {
		return w, err
	}
	fmt.Fprintf(progress, "testworld: etcd starting on %s\n", etcdURL)
	if err := etcd.waitUntil(ctx, httpOK(etcdURL+"/health", nil)); err != nil {
		return w, err
	}

	// kube-apiserver
	tokens := filepath.Join(tmp, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"+webhookCallerToken+","+WebhookCaller+","+WebhookCaller+"\n"), 0o600); err != nil {
		return w, err
	}
	admissionConfig, err := writeWebhookAuth(tmp)
	if err != nil {
		return w, err
	}
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	api, err := w.start("kube-apiserver", logPath("kube-apiserver"), bin(binAPIServer), append(alphaAPIs(Minor()),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(apiPort),
		"--tls-cert-file", p.servingCert,
		"--tls-private-key-file", p.servingKey,
		"--client-ca-file", p.caFile,
		"--cert-dir", filepath.Join(tmp, "apiserver-certs"),
		"--token-auth-file", tokens,
		"--authorization-mode", "Node,RBAC",
		// As every real cluster: a node's identity writes its own Node
		// and the pods bound to it only.
		"--enable-admission-plugins", "NodeRestriction",
		"--admission-control-config-file", admissionConfig,
		// A real node (StartRealNode) is reached at its InternalIP, with
		// a client certificate its kubelet trusts.
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", p.kubeletClientCert,
		"--kubelet-client-key", p.kubeletClientKey,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.saPublicKey,
		"--service-account-signing-key-file", p.saPrivateKey,
		"--api-audiences", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		"--allow-privileged=true",
		"--profiling=false",
		// API Priority and Fairness on, as in every real cluster: a
		// client the API server throttles gets 429 with Retry-After.
		"--enable-priority-and-fairness=true",
		// Webhooks called at their Service's endpoints, not its cluster
		// IP: there is no kube-proxy. A Service with no ready endpoint
		// fails the call at once.
		"--enable-aggregator-routing=true",
		"--v", "1",
	)...)
	if err != nil {
		return w, err
	}
	w.Config = &rest.Config{
		Host:            apiURL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caCert},
		QPS:             200,
		Burst:           400,
	}
	fmt.Fprintf(progress, "testworld: kube-apiserver starting on %s\n", apiURL)
	if err := api.waitUntil(ctx, httpOK(apiURL+"/readyz", w.Config)); err != nil {
		return w, err
	}
	w.Client, err = kubernetes.NewForConfig(w.Config)
	if err != nil {
		return w, err
	}
	w.Kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := WriteKubeconfig(w.Kubeconfig, w.Config); err != nil {
		return w, err
	}

	// controllers, scheduler, kwok
	var kcmArgs []string
	if opts.NodeMonitorGracePeriod > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-grace-period", opts.NodeMonitorGracePeriod.String(),
			"--node-startup-grace-period", opts.NodeMonitorGracePeriod.String())
	}
	if opts.NodeMonitorPeriod > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-period", opts.NodeMonitorPeriod.String())
	}
	if opts.ControllerQPS > 0 {
		kcmArgs = append(kcmArgs, "--kube-api-qps", fmt.Sprint(opts.ControllerQPS), "--kube-api-burst", fmt.Sprint(2*opts.ControllerQPS))
	}
	kcm, err := w.start("kube-controller-manager", logPath("kube-controller-manager"), bin(binControllerManager), append(kcmArgs,
		"--kubeconfig", w.Kubeconfig,
		"--authentication-kubeconfig", w.Kubeconfig,
		"--authorization-kubeconfig", w.Kubeconfig,
		"--controllers", strings.Join(Controllers, ","),
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(kcmPort),
		"--cert-dir", filepath.Join(tmp, "kcm-certs"),
		"--service-account-private-key-file", p.saPrivateKey,
		"--root-ca-file", p.caFile,
		"--use-service-account-credentials=false",
		"--profiling=false",
		"--v", "1",
	)...)
	if err != nil {
		return w, err
	}
	sched, err := w.start("kube-scheduler", logPath("kube-scheduler"), bin(binScheduler),
		"--kubeconfig", w.Kubeconfig,
		"--authentication-kubeconfig", w.Kubeconfig,
		"--authorization-kubeconfig", w.Kubeconfig,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(schedPort),
		"--cert-dir", filepath.Join(tmp, "scheduler-certs"),
		"--profiling=false",
		"--v", "1",
	)
	if err != nil {
		return w, err
	}
	stages, err := filepath.Glob(filepath.Join(dir, "stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return w, fmt.Errorf("no kwok stages in %s", dir)
	}
	kwokArgs := []string{
		"--kubeconfig", w.Kubeconfig,
		"--manage-nodes-with-annotation-selector", KwokNodeAnnotation + "=" + KwokNodeValue,
		"--node-lease-duration-seconds", "40",
		"--server-address", fmt.Sprintf("127.0.0.1:%d", kwokPort),
		"--cidr", "10.244.0.0/16",
		"--node-ip", "127.0.0.1",
	}
	own := filepath.Join(tmp, "stages")
	if err := os.CopyFS(own, ownStages); err != nil {
		return w, fmt.Errorf("write the test world's kwok stages: %w", err)
	}
	mine, _ := filepath.Glob(filepath.Join(own, "stages", "*.yaml"))
	for _, s := range append(stages, mine...) {
		kwokArgs = append(kwokArgs, "--config", s)
	}
	kwok, err := w.start("kwok", logPath("kwok"), bin(binKwok), kwokArgs...)
	if err != nil {
		return w, err
	}
	fmt.Fprintf(progress, "testworld: controller-manager, scheduler and kwok starting\n")
	if err := kcm.waitUntil(ctx, httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), nil)); err != nil {
		return w, err
	}
	if err := sched.waitUntil(ctx, httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), nil)); err != nil {
		return w, err
	}
	if err := kwok.waitUntil(ctx, httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), nil)); err != nil {
		return w, err
	}
	// The service-account controller has run once it made "default" in
	// the default namespace.
	if err := kcm.waitUntil(ctx, func(ctx context.Context) bool {
		_, err := w.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return w, err
	}
	if err := w.createGKEQuota(ctx); err != nil {
		return w, err
	}
	w.StartupTime = time.Since(begin)
	fmt.Fprintf(progress, "testworld: ready in %s (%s)\n", w.StartupTime.Round(time.Millisecond), tmp)
	return w, nil
}

func (w *World) start(name, logPath, bin string, args ...string) (*proc, error) {
	p, err := startProc(name, logPath, bin, args...)
	if err != nil {
		return nil, err
	}
	w.track(p)
	return p, nil
}

// track makes p one of the world's processes: listed by Pids and stopped
// by Stop.
func (w *World) track(p *proc) {
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
}

// Pids lists the process ids of the world's components.
func (w *World) Pids() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	pids := make([]int, 0, len(w.procs))
	for _, p := range w.procs {
		pids = append(pids, p.Pid())
	}
	return pids
}

// Stop stops every component in reverse start order (kube-apiserver before
// etcd, bounded, then SIGKILL) and removes the temp directory unless
// KeepDir. It is safe to call more than once.
func (w *World) Stop() error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	procs := w.procs
	w.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if !w.keepDir && w.TempDir != "" {
		if err := os.RemoveAll(w.TempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ConfigForToken returns a rest.Config that authenticates with token.
func (w *World) ConfigForToken(token string) *rest.Config {
	cfg := rest.CopyConfig(w.Config)
	cfg.BearerToken = token
	return cfg
}

// ConfigForNode is a client config that authenticates as node name's
// kubelet does (a client certificate for system:node:NAME in
// system:nodes), its files written into dir.
func (w *World) ConfigForNode(dir, name string) (*rest.Config, error) {
	cert, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := w.pki.nodeClientCert(cert, key, name); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(w.Config)
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
	cfg.CertFile, cfg.KeyFile = cert, key
	return cfg, nil
}

// FreeAddr returns a loopback host:port that was free a moment ago, for a
// process about to listen on it.
func FreeAddr() (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}

// FreeAddrT is FreeAddr for a test: it fails the test on error.
func FreeAddrT(t testing.TB) string {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// freePorts reserves n distinct free loopback ports and releases them, for
// servers that bind them a moment later. The ports come from outside the
// kernel's ephemeral range: a port the kernel handed out for ":0" is also
// what it hands out as the local port of the next outgoing connection, and
// with many test binaries connecting at once one of them could take it
// before the server binds it ("address already in use"). Outside that
// range only another listener can, which would have to pick the same port
// at random in that very moment.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	low, high := listenRange()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("find a free port in %d-%d: none free in 1000 tries", low, high)
		}
		port := low + mathrand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// listenRange is where freePorts picks: below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), above the ports
// services usually listen on, or above the ephemeral range when it starts
// too low to leave room below.
func listenRange() (low, high int) {
	ephemeralLow, ephemeralHigh := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if l, err := strconv.Atoi(f[0]); err == nil {
				ephemeralLow = l
			}
			if h, err := strconv.Atoi(f[1]); err == nil {
				ephemeralHigh = h
			}
		}
	}
	if ephemeralLow-20000 >= 4000 {
		return 20000, ephemeralLow
	}
	return ephemeralHigh + 1, 65535
}

// httpOK returns a probe that GETs url (with cfg's credentials and CA if
// given, else without verifying TLS) and reports a 200.
func httpOK(url string, cfg *rest.Config) func(context.Context) bool {
	return httpAnswers(http.MethodGet, url, cfg, func(status int) bool { return status == http.StatusOK })
}

// httpAnswers: a method request to url (through cfg's transport, or
// plain TLS that trusts anything on loopback) is answered with a status
// accept takes.
func httpAnswers(method, url string, cfg *rest.Config, accept func(status int) bool) func(context.Context) bool {
	var client *http.Client
	if cfg != nil {
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			return func(context.Context) bool { return false }
		}
		client = &http.Client{Transport: rt, Timeout: 2 * time.Second}
	} else {
		client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe of a test component
		}}
	}
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return accept(resp.StatusCode)
	}
}

// WriteKubeconfig writes a kubeconfig for cfg's server and CA, and its
// bearer token or client certificate files, to path.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testworld"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile, ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile}
	kc.Contexts["testworld"] = &clientcmdapi.Context{Cluster: "testworld", AuthInfo: "admin"}
	kc.CurrentContext = "testworld"
	return clientcmd.WriteToFile(*kc, path)
}

// randSuffix returns n random lowercase hex characters.
func randSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// ensureNamespaceGone is used by cleanup; a missing namespace is fine.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Process is a program run as part of the world (an agent, say).
type Process struct{ p *proc }

// StartProcess runs bin with args as part of the world: it is stopped with
// the world, dies with this process, and writes its output to
// TempDir/logs/name.log.
//
// A product binary (agent, aggregator) must run with the identity it
// ships with (AgentKubeconfig, AggregatorKubeconfig): one given the
// admin's credentials is refused with ErrAdminIdentity.
func (w *World) StartProcess(name, bin string, args ...string) (*Process, error) {
	if err := refuseAdmin(bin, args, nil); err != nil {
		return nil, err
	}
	p, err := w.start(name, filepath.Join(w.TempDir, "logs", name+".log"), bin, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// StartProcessEnv is StartProcess with env (KEY=VALUE) added to this
// process's environment.
func (w *World) StartProcessEnv(name string, env []string, bin string, args ...string) (*Process, error) {
	if err := refuseAdmin(bin, args, env); err != nil {
		return nil, err
	}
	p, err := startProcEnv(name, filepath.Join(w.TempDir, "logs", name+".log"), env, bin, args...)
	if err != nil {
		return nil, err
	}
	w.track(p)
	return &Process{p: p}, nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL.
func (p *Process) Stop(grace time.Duration) error { return p.p.stop(grace) }

// Pid is the process id.
func (p *Process) Pid() int { return p.p.Pid() }

// Kill sends SIGKILL at once, as a crash would, and waits for the exit.
func (p *Process) Kill() error { return p.p.kill() }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.p.exited }

// LogPath is where the process's output goes.
func (p *Process) LogPath() string { return p.p.logPath }

// alphaAPIs are the API server's flags that turn on the APIs the product
// uses that are off by default, as a cluster that turns them on serves
// them, on the minors that have them (an older minor refuses an unknown
// gate): EvictionRequests (lifecycle.k8s.io/v1alpha1, alpha from 1.37),
// which the agent asks through with --eviction-requests; and the pods'
// scheduling groups (spec.schedulingGroup, GenericWorkload: alpha from
// 1.35, beta and still off in 1.37), which make a gang.
func alphaAPIs(minor int) []string {
	var gates []string
	if minor >= 35 {
		gates = append(gates, "GenericWorkload=true")
	}
	if minor >= 37 {
		gates = append(gates, "EvictionRequestAPI=true")
	}
	if len(gates) == 0 {
		return nil
	}
	flags := []string{"--feature-gates", strings.Join(gates, ",")}
	if minor >= 37 {
		flags = append(flags, "--runtime-config", "lifecycle.k8s.io/v1alpha1=true")
	}
	return flags
}
