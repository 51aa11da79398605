package testworld

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Pinned versions of a real node's pieces besides the kubelet, which is
// built at KubernetesVersion. runc and the CNI plugins are the versions of
// Debian's packages (scripts/fetch-deb.sh), recorded in the build.
const ContainerdVersion = "v2.2.9"

// Binary names inside the bin directory of a built node.
const (
	binKubelet    = "kubelet"
	binContainerd = "containerd"
	binShim       = "containerd-shim-runc-v2"
	binCtr        = "ctr"
	binRunc       = "runc"
)

// cniPlugins are the CNI plugins a node's pod network uses.
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// NodeKey names one combination of a real node's pinned versions and the
// platform; the node's pieces are cached apart from the control plane, so
// a machine that never runs a real node never builds one.
func NodeKey() string {
	return fmt.Sprintf("node-k8s-%s_containerd-%s_%s-%s", KubernetesVersion, ContainerdVersion, runtime.GOOS, runtime.GOARCH)
}

// NodeDir is the directory that holds (or will hold) a built real node:
// bin/ with the kubelet, containerd, its shim, ctr and runc, and cni/ with
// the CNI plugins. It is a sibling of Dir.
func NodeDir() (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dir), NodeKey()), nil
}

// BuildNode compiles the kubelet (in the same module and build cache as
// the control plane) and containerd with its shim and ctr (from the module
// proxy), and unpacks Debian's runc and CNI plugins, into dir unless they
// are there. Like Build it holds a file lock and reports each step.
func BuildNode(ctx context.Context, dir string, progress io.Writer) error {
	return buildSteps(ctx, dir, progress, "real node",
		fmt.Sprintf("building a real node into %s (kubelet %s, containerd %s, Debian's runc and CNI plugins)", dir, KubernetesVersion, ContainerdVersion),
		func(b builder) []buildStep {
			return []buildStep{
				{"runc and the CNI plugins (Debian)", func(ctx context.Context) error { return b.debs(ctx, dir) }},
				{"containerd " + ContainerdVersion, b.containerd},
				{"kubelet " + KubernetesVersion, b.kubelet},
			}
		})
}

func (b builder) kubelet(ctx context.Context) error {
	return b.scratchBuild(ctx, "k8s.io/kubernetes", KubernetesVersion, StagingVersion, kubernetesLDFlags(), map[string]string{
		"k8s.io/kubernetes/cmd/kubelet": binKubelet,
	})
}

// containerd installs the daemon, its runc shim and ctr, without cgo and
// without the snapshotters that need it (overlayfs and native remain).
func (b builder) containerd(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "testworld-containerd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"install", "-tags", "no_btrfs no_devmapper no_zfs", "-ldflags=-s -w"}
	for _, c := range []string{binContainerd, binShim, binCtr} {
		args = append(args, "github.com/containerd/containerd/v2/cmd/"+c+"@"+ContainerdVersion)
	}
	return b.goCmd(ctx, tmp, []string{"GOBIN=" + b.bin}, args...)
}

// debs copies runc and the CNI plugins out of Debian's packages, unpacked
// by the project's script, into the node's bin and cni directories.
func (b builder) debs(ctx context.Context, dir string) error {
	runc, err := FetchDeb(ctx, "runc")
	if err != nil {
		return err
	}
	if err := copyFile(filepath.Join(runc, "usr/sbin/runc"), filepath.Join(b.bin, binRunc)); err != nil {
		return err
	}
	cni, err := FetchDeb(ctx, "containernetworking-plugins")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o755); err != nil {
		return err
	}
	for _, p := range cniPlugins {
		if err := copyFile(filepath.Join(cni, "usr/lib/cni", p), filepath.Join(dir, "cni", p)); err != nil {
			return err
		}
	}
	return nil
}

// FetchDeb unpacks one of Debian's packages with the project's script
// (scripts/fetch-deb.sh) and returns the folder it is in.
func FetchDeb(ctx context.Context, pkg string) (string, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "fetch-deb.sh"), pkg)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetch Debian's %s: %w\n%s", pkg, err, tail(stderr.String(), 2000))
	}
	return strings.TrimSpace(string(out)), nil
}

// ModuleRoot is the project's root: the folder of the go.mod the go tool
// finds from the working directory (every test and make target runs inside
// the module).
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the project's module")
	}
	return filepath.Dir(gomod), nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".partial"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
