package testworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// A real node is a kubelet with containerd, runc and the CNI bridge plugin
// that joins a world beside its kwok nodes and runs real containers. The
// kubelet holds fixed host paths (its device-plugin socket) and the node
// holds fixed addresses, so one machine runs one real node at a time: a
// file lock serialises them across test binaries.
//
// Addresses, all on this machine: the node's InternalIP sits alone on a
// host-only bridge, with the kubernetes Service's IP beside it, relayed to
// the API server's loopback port (there is no kube-proxy); pods get
// addresses on a CNI bridge and reach both through it.
const (
	realNodeIP     = "10.99.0.1"
	serviceIP      = "10.96.0.1" // first of the world's --service-cluster-ip-range
	realNodeLink   = "mhnode0"
	realPodLink    = "mhcni0"
	realPodSubnet  = "10.88.0.0/16"
	realCgroupRoot = "mh-realnode"
	// PauseImage is the sandbox image every real node holds, built by the
	// project from test/cmd/pause.
	PauseImage = "registry.test/mh/pause:1"
)

// RealNodeOptions configure StartRealNode.
type RealNodeOptions struct {
	// Name of the Node; empty means "real-node".
	Name string
	// Labels and Taints the kubelet registers the Node with.
	Labels map[string]string
	Taints []corev1.Taint
	// Progress receives one line per start-up step; nil discards.
	Progress io.Writer
}

// RealNode is one kubelet and containerd of a world. Fields are read-only.
type RealNode struct {
	Name string
	// IP is the Node's InternalIP.
	IP string
	// Root holds the node's state: the kubelet's and containerd's
	// directories, its logs and pod logs.
	Root string
	// StartupTime is how long StartRealNode took.
	StartupTime time.Duration

	w          *World
	lock       *os.File
	socket     string
	bin        string
	containerd *proc
	kubelet    *proc
	relay      *relay
	mu         sync.Mutex
	stopped    bool
}

// realNodeRoot is where the running real node keeps its state: a fixed
// place, so that a node whose test binary was killed is found and removed
// by the next one (or by `testworld leaks`).
func realNodeRoot() string { return filepath.Join(os.TempDir(), "mh-realnode") }

func realNodeLockPath() string { return filepath.Join(os.TempDir(), "mh-realnode.lock") }

// RealNodeSupport says why this machine cannot run a real node, or nil
// when it can: it needs Linux, root, overlayfs, a memory cgroup (v1 or v2)
// and the ip tool.
func RealNodeSupport() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("a real node needs Linux, this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (containerd, runc, mounts, cgroups and bridges)")
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		return errors.New("a real node needs overlayfs, which this kernel does not offer")
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
			return errors.New("a real node needs a memory cgroup: /sys/fs/cgroup has neither cgroup v2 nor v1's memory controller")
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("a real node needs the ip tool (iproute2) for its bridges")
	}
	return nil
}

// RealNodeT starts a real node in w for a test and stops it at the test's
// end; it skips the test with one line saying why when the machine cannot
// run one, and builds the node's pieces first when they are not cached.
func (w *World) RealNodeT(t testing.TB, opts RealNodeOptions) *RealNode {
	t.Helper()
	if err := RealNodeSupport(); err != nil {
		t.Skipf("real node: skipped: %v", err)
	}
	// The machine runs one real node at a time, across both of make
	// test's passes: a test may wait for the other's before its own
	// (and before that, a cold build of the node's pieces).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := NodeDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := BuildNode(ctx, dir, testLog{t}); err != nil {
		t.Fatal(err)
	}
	n, err := w.StartRealNode(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop real node: %v", err)
		}
	})
	t.Logf("real node %s ready in %s", n.Name, n.StartupTime.Round(time.Millisecond))
	return n
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StartRealNode starts containerd and a kubelet built in dir (BuildNode)
// as a Node of w, imports the pause image, and waits until the Node is
// Ready. It waits for any other real node on this machine to stop first,
// and removes what a killed one left behind. On error, whatever was
// started is torn down.
func (w *World) StartRealNode(ctx context.Context, dir string, opts RealNodeOptions) (n *RealNode, err error) {
	begin := time.Now()
	if !Built(dir) {
		return nil, fmt.Errorf("real node is not built in %s: run `go run ./test/cmd/testworld build-node`", dir)
	}
	if opts.Name == "" {
		opts.Name = "real-node"
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	lock, err := lockRealNode(ctx)
	if err != nil {
		return nil, err
	}
	if err := sweepRealNode(progress); err != nil {
		unlockRealNode(lock)
		return nil, fmt.Errorf("remove what an earlier real node left: %w", err)
	}
	n = &RealNode{Name: opts.Name, IP: realNodeIP, Root: realNodeRoot(), w: w, lock: lock, bin: filepath.Join(dir, "bin")}
	defer func() {
		if err != nil {
			_ = n.Stop()
		}
	}()
	paths := []string{"runc", "containerd/root", "containerd/state", "containerd/opt", "kubelet", "cni/net.d", "cni/ipam", "logs", "pod-logs", "images"}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Join(n.Root, p), 0o755); err != nil {
			return n, err
		}
	}
	if err := n.hostPaths(); err != nil {
		return n, err
	}
	if err := n.network(); err != nil {
		return n, err
	}
	if err := makeCgroupRoot(); err != nil {
		return n, err
	}
	if n.relay, err = startRelay(net.JoinHostPort(serviceIP, "443"), strings.TrimPrefix(w.Config.Host, "https://")); err != nil {
		return n, err
	}

	fmt.Fprintf(progress, "testworld: containerd %s starting for real node %s\n", ContainerdVersion, n.Name)
	if err := n.startContainerd(ctx, dir); err != nil {
		return n, err
	}
	if err := n.importPause(ctx); err != nil {
		return n, err
	}
	fmt.Fprintf(progress, "testworld: kubelet %s starting as node %s (%s)\n", KubernetesVersion, n.Name, n.IP)
	if err := n.startKubelet(ctx, opts); err != nil {
		return n, err
	}
	if err := n.kubelet.waitUntil(ctx, func(ctx context.Context) bool {
		node, err := w.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && nodeReady(node)
	}); err != nil {
		return n, err
	}
	n.StartupTime = time.Since(begin)
	fmt.Fprintf(progress, "testworld: real node %s ready in %s\n", n.Name, n.StartupTime.Round(time.Millisecond))
	return n, nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// lockRealNode takes the machine's real-node lock, waiting for ctx.
func lockRealNode(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(realNodeLockPath(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open real-node lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("take real-node lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another real node runs on this machine: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func unlockRealNode(f *os.File) {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	f.Close()
}

// createdPathsFile lists the host paths outside Root that this node
// created, so that the sweep removes those and nothing that was there
// before.
const createdPathsFile = "created-host-paths"

// hostPaths creates the fixed host paths the kubelet and libcni write
// whatever the node's directories, recording each one it made.
func (n *RealNode) hostPaths() error {
	var created []string
	// containerd's shims put their sockets in /run/containerd/s whatever
	// its state directory.
	for _, p := range []string{"/var/lib/kubelet/device-plugins", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd/s"} {
		// Record the highest missing ancestor, the one to remove.
		top := ""
		for q := p; q != "/"; q = filepath.Dir(q) {
			if _, err := os.Stat(q); errors.Is(err, os.ErrNotExist) {
				top = q
			}
		}
		if top == "" {
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		created = append(created, top)
	}
	return os.WriteFile(filepath.Join(n.Root, createdPathsFile), []byte(strings.Join(created, "\n")), 0o644)
}

// network makes the host-only bridge with the node's IP and the Service
// IP. The pod bridge is made by the CNI bridge plugin.
func (n *RealNode) network() error {
	for _, args := range [][]string{
		{"link", "add", realNodeLink, "type", "bridge"},
		{"addr", "add", realNodeIP + "/32", "dev", realNodeLink},
		{"addr", "add", serviceIP + "/32", "dev", realNodeLink},
		{"link", "set", realNodeLink, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// cgroupDirs are the node's cgroup root in each mounted hierarchy (the
// unified one on v2).
func cgroupDirs() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{filepath.Join("/sys/fs/cgroup", realCgroupRoot)}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			if fi, err := os.Lstat(filepath.Join("/sys/fs/cgroup", e.Name())); err == nil && fi.Mode()&os.ModeSymlink == 0 {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), realCgroupRoot))
			}
		}
	}
	return dirs
}

func makeCgroupRoot() error {
	for _, d := range cgroupDirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
	}
	return nil
}

// containerdConfig is containerd's configuration (version 3): every
// directory under the node's root, the CRI plugin with runc from the node
// build, the CNI bridge, and what this kind of machine needs (no
// CAP_SYS_RESOURCE: restrict_oom_score_adj).
const containerdConfig = `version = 3
root = "{{root}}/containerd/root"
state = "{{root}}/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{socket}}"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{{root}}/containerd/opt"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{{pause}}"
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{{bin}}/runc"
          Root = "{{root}}/runc"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{{cni}}"]
      conf_dir = "{{root}}/cni/net.d"
      use_internal_loopback = true
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`

// cniConfig is the pod network: a bridge with host-local addresses, no
// masquerade (nothing leaves the machine).
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "mh-pods",
  "plugins": [{
    "type": "bridge",
    "bridge": "` + realPodLink + `",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "` + realPodSubnet + `"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "{{root}}/cni/ipam"
    }
  }]
}
`

func (n *RealNode) expand(s, dir string) string {
	return strings.NewReplacer("{{root}}", n.Root, "{{socket}}", n.socket, "{{bin}}", n.bin,
		"{{cni}}", filepath.Join(dir, "cni"), "{{pause}}", PauseImage).Replace(s)
}

func (n *RealNode) startContainerd(ctx context.Context, dir string) error {
	n.socket = filepath.Join(n.Root, "containerd", "containerd.sock")
	cfg := filepath.Join(n.Root, "containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(n.expand(containerdConfig, dir)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Root, "cni", "net.d", "10-mh-pods.conflist"), []byte(n.expand(cniConfig, dir)), 0o644); err != nil {
		return err
	}
	p, err := startProcEnv("containerd", filepath.Join(n.Root, "logs", "containerd.log"),
		[]string{"PATH=" + n.bin + ":" + os.Getenv("PATH")},
		filepath.Join(n.bin, binContainerd), "--config", cfg, "--log-level", "warn")
	if err != nil {
		return err
	}
	n.containerd = p
	n.w.track(p)
	return p.waitUntil(ctx, func(ctx context.Context) bool {
		return exec.CommandContext(ctx, filepath.Join(n.bin, binCtr), "--address", n.socket, "version").Run() == nil
	})
}

// ctr runs containerd's client against this node in the CRI's namespace.
func (n *RealNode) ctr(ctx context.Context, args ...string) ([]byte, error) {
	all := append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(n.bin, binCtr), all...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 2000))
	}
	return out, nil
}

func (n *RealNode) startKubelet(ctx context.Context, opts RealNodeOptions) error {
	certs, err := n.w.pki.nodeCerts(filepath.Join(n.Root, "kubelet-pki"), n.Name, n.IP)
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Root, "kubelet.kubeconfig")
	if err := writeCertKubeconfig(kubeconfig, n.w.Config, certs.clientCert, certs.clientKey); err != nil {
		return err
	}
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"failCgroupV1":                false,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  "/" + realCgroupRoot,
		"address":                     n.IP,
		"port":                        ports[0],
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 ports[1],
		"tlsCertFile":                 certs.servingCert,
		"tlsPrivateKeyFile":           certs.servingKey,
		"containerRuntimeEndpoint":    "unix://" + n.socket,
		"podLogsDir":                  filepath.Join(n.Root, "pod-logs"),
		"failSwapOn":                  false,
		"resolvConf":                  "/etc/resolv.conf",
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"shutdownGracePeriod":         "0s",
		"registerWithTaints":          opts.Taints,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": n.w.pki.caFile},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(n.Root, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		return err
	}
	args := []string{
		"--config", cfgPath,
		"--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(n.Root, "kubelet"),
		"--hostname-override", n.Name,
		"--node-ip", n.IP,
		"--v", "1",
	}
	if len(opts.Labels) > 0 {
		var labels []string
		for k, v := range opts.Labels {
			labels = append(labels, k+"="+v)
		}
		args = append(args, "--node-labels", strings.Join(labels, ","))
	}
	p, err := startProcEnv("kubelet", filepath.Join(n.Root, "logs", "kubelet.log"), nil, filepath.Join(n.bin, binKubelet), args...)
	if err != nil {
		return err
	}
	n.kubelet = p
	n.w.track(p)
	return nil
}

// Stop tears the node down completely: the kubelet first (so it restarts
// nothing), every container process, the shims, containerd, then every
// mount under Root, Root itself, the cgroups, the bridges and the host
// paths it created; then it deletes the Node. It is safe to call more
// than once.
func (n *RealNode) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return nil
	}
	n.stopped = true
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.stop(10*time.Second))
	}
	if n.relay != nil {
		n.relay.close()
	}
	errs = append(errs, sweepRealNode(io.Discard))
	if n.containerd != nil {
		errs = append(errs, n.containerd.stop(10*time.Second))
	}
	if n.w != nil && n.w.Client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, ignoreNotFound(n.w.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})))
		cancel()
	}
	if n.lock != nil {
		unlockRealNode(n.lock)
	}
	return errors.Join(errs...)
}

// ContainerLog is the log file of a container of a pod on this node (the
// kubelet's podLogsDir layout: namespace_name_uid/container/restart.log),
// for a test that reads what the container printed.
func (n *RealNode) ContainerLog(pod *corev1.Pod, container string, restart int) string {
	return filepath.Join(n.Root, "pod-logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container, fmt.Sprintf("%d.log", restart))
}

// writeCertKubeconfig writes a kubeconfig for cfg's server and CA that
// authenticates with a client certificate.
func writeCertKubeconfig(path string, cfg *rest.Config, cert, key string) error {
	c := rest.CopyConfig(cfg)
	c.BearerToken = ""
	c.CertFile, c.KeyFile = cert, key
	return WriteKubeconfig(path, c)
}
