// Package vms runs simulated accelerator VMs in the test world: for each,
// a kwok Node, its own metadata server and Compute API emulator, and its
// own agent process (the real binary). The demo and the tests that need
// whole agents use it.
//
// Concurrency: a Fleet is used from one goroutine; its VMs' emulators are
// safe for concurrent use.
package vms

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// VM is one simulated VM.
type VM struct {
	Name        string
	Spot        bool
	Emu         *gceemu.Server
	Agent       *testworld.Process
	MetricsAddr string
	// Kubeconfig is the agent's shipped identity, bound to its Node
	// (testworld.World.AgentKubeconfig), unless the Fleet's AgentArgs
	// name another.
	Kubeconfig string
}

// Fleet is a set of VMs in one world.
type Fleet struct {
	World    *testworld.World
	AgentBin string
	// AgentArgs are added to every agent's command line.
	AgentArgs []string
	VMs       []*VM
	// Project, when set, is the project's Compute API for the caller off
	// the VMs (the aggregator, run with its identity by the test): every
	// VM added is routed by it, its own service account is granted no
	// Compute permission, and its agent runs as installed by default
	// (--compute-caller aggregator). Nil: the agents make the calls with
	// their VMs' own tokens (--compute-caller node).
	Project *gceemu.Project
}

// ClusterName is the GKE cluster the Fleet's VMs say they belong to (their
// goog-k8s-cluster-name resource label).
const ClusterName = "testworld"

// Add creates the Node for spec, its emulator (cfg, with spec's name) and
// its agent. A cfg without Labels gets the resource labels GKE puts on a
// node pool's VMs: its cluster and the Node's pool.
func (f *Fleet) Add(ctx context.Context, spec testworld.NodeSpec, cfg gceemu.Config) (*VM, error) {
	n, err := f.World.AddNode(ctx, spec)
	if err != nil {
		return nil, err
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{"goog-k8s-cluster-name": ClusterName, protocol.VMResourceLabelNodePool: n.Labels[testworld.LabelNodePool]}
	}
	cfg.Name = spec.Name
	if cfg.Project == "" {
		cfg.Project = spec.Project
	}
	if cfg.Zone == "" {
		cfg.Zone = spec.Zone
	}
	v := &VM{Name: spec.Name, Spot: spec.Spot, Emu: gceemu.New(cfg)}
	if err := v.Emu.Start(); err != nil {
		return nil, err
	}
	if f.Project != nil {
		v.Emu.DenyOwnToken(true)
		f.Project.Add(v.Emu)
	}
	f.VMs = append(f.VMs, v)
	return v, f.StartAgent(v)
}

// StartAgent starts v's agent process. A restarted agent keeps its metrics
// address, as a DaemonSet pod on the host network does.
func (f *Fleet) StartAgent(v *VM) error {
	if v.MetricsAddr == "" {
		addr, err := testworld.FreeAddr()
		if err != nil {
			return err
		}
		v.MetricsAddr = addr
	}
	caller := "node"
	if f.Project != nil {
		caller = "aggregator"
	}
	if v.Kubeconfig == "" && !slices.ContainsFunc(f.AgentArgs, func(a string) bool { return strings.HasPrefix(a, "--kubeconfig") }) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		path, err := f.World.AgentKubeconfig(ctx, v.Name, f.AgentArgs...)
		if err != nil {
			return err
		}
		v.Kubeconfig = path
	}
	var args []string
	if v.Kubeconfig != "" {
		args = []string{"--kubeconfig", v.Kubeconfig}
	}
	args = append(args, "--node-name", v.Name, "--metadata-host", v.Emu.Host(),
		"--compute-endpoint", v.Emu.ComputeEndpoint(), "--compute-caller", caller, "--listen-address", v.MetricsAddr)
	args = append(args, f.AgentArgs...)
	p, err := f.World.StartProcess("agent-"+v.Name, f.AgentBin, args...)
	if err != nil {
		return err
	}
	v.Agent = p
	return nil
}

// Reboot plays the VM stopping and coming back: its agent dies with it,
// the Node gets a new boot ID, the metadata server is quiet again, and a
// new agent starts.
func (f *Fleet) Reboot(ctx context.Context, v *VM) error { return f.RebootInto(ctx, v, "") }

// RebootInto is Reboot into another kubelet version (an upgrade); ""
// keeps the version.
func (f *Fleet) RebootInto(ctx context.Context, v *VM, kubeletVersion string) error {
	if err := v.Agent.Kill(); err != nil {
		return err
	}
	return f.bootInto(ctx, v, kubeletVersion)
}

// RepairOnReport plays Compute Engine taking v's fault report: the VM
// stops when the report's operation ends (at once where it takes no time;
// gceemu.Server.SetReportDuration), its agent dying with it, and comes back from the repair
// after away, on a host made healthy by repaired (run just before), as
// Reboot has it come back. Errors are the returned channel's (one value
// per report, nil when the VM came back).
func (f *Fleet) RepairOnReport(ctx context.Context, v *VM, away time.Duration, repaired func() error) <-chan error {
	done := make(chan error, 4)
	v.Emu.SetOnReport(func(gceemu.Call) {
		err := v.Agent.Kill()
		if err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(away):
			}
		}
		if err == nil && repaired != nil {
			err = repaired()
		}
		if err == nil {
			err = f.bootInto(ctx, v, "")
		}
		done <- err
	})
	return done
}

// bootInto brings v's VM up again: a new boot ID (and kubeletVersion
// unless ""), the metadata server quiet, a new agent.
func (f *Fleet) bootInto(ctx context.Context, v *VM, kubeletVersion string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := f.World.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.NodeInfo.BootID = testworld.NewBootID()
		if kubeletVersion != "" {
			n.Status.NodeInfo.KubeletVersion = kubeletVersion
		}
		_, err = f.World.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("reboot %s: %w", v.Name, err)
	}
	v.Emu.Clear()
	return f.StartAgent(v)
}

// Close stops the emulators (the agents stop with the world).
func (f *Fleet) Close() {
	for _, v := range f.VMs {
		_ = v.Emu.Close()
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binaries builds the project's binaries (agent, aggregator, demo) once per
// process into a temporary directory (named so that `testworld leaks` finds
// any left running) and returns it. RemoveBinaries deletes it; RunMain does
// both for a test package.
func Binaries() (string, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", testworld.ProjectBinaryPrefix)
		if buildErr != nil {
			return
		}
		root, err := testworld.ModuleRoot(context.Background())
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+string(filepath.Separator), "./cmd/agent", "./cmd/aggregator", "./test/cmd/demo")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	return buildDir, buildErr
}

// RunMain is testworld.RunMain for a package whose tests run the project's
// binaries: it also deletes them at the end.
//
//	func TestMain(m *testing.M) { os.Exit(fleet.RunMain(m, &world)) }
func RunMain(m *testing.M, w **testworld.World) int {
	defer RemoveBinaries()
	return testworld.RunMain(m, w)
}

// ForTest is a Fleet of t's in w: its agents, built by Binaries, start
// with agentArgs and --log-level warn, and every agent and emulator stops
// when t ends; t fails if a Compute API request an emulator received, or
// an answer it gave, is not as Google's description of the API allows.
func ForTest(t testing.TB, w *testworld.World, agentArgs ...string) *Fleet {
	t.Helper()
	bins, err := Binaries()
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{World: w, AgentBin: filepath.Join(bins, "agent"), AgentArgs: append(agentArgs, "--log-level", "warn")}
	t.Cleanup(func() {
		for _, v := range f.VMs {
			_ = v.Agent.Kill()
		}
		f.Close()
		for _, v := range f.VMs {
			for _, p := range v.Emu.ContractProblems() {
				t.Errorf("Compute API contract, %s: %s", v.Name, p)
			}
		}
	})
	return f
}

// RemoveBinaries deletes what Binaries built.
func RemoveBinaries() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}
