package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// The demo is checked as a user runs it: the binary, built as `make demo`
// builds it, its timeline read from its standard output.

// binaries builds the demo, the agent and the aggregator once per test
// binary.
func binaries(t *testing.T) string {
	t.Helper()
	dir, err := vms.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	vms.RemoveBinaries()
	os.Exit(code)
}

// demoRun is one demo process whose output lines are collected as they come.
type demoRun struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string      // the messages, without the elapsed-time column
	grew  chan struct{} // closed and replaced on every line
	done  chan struct{} // closed when stdout ends
}

var elapsed = regexp.MustCompile(`^\s*\d+\.\ds  `)

func startDemo(t *testing.T, args ...string) *demoRun {
	t.Helper()
	dir := binaries(t)
	args = append([]string{"--agent-bin", filepath.Join(dir, "agent"), "--aggregator-bin", filepath.Join(dir, "aggregator")}, args...)
	r := &demoRun{cmd: exec.Command(filepath.Join(dir, "demo"), args...), grew: make(chan struct{}), done: make(chan struct{})}
	r.cmd.Stderr = os.Stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on a failed test: the demo's own Ctrl-C path, then the hard way
		_ = r.cmd.Process.Signal(os.Interrupt)
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			_ = r.cmd.Process.Kill()
		}
		_ = r.cmd.Wait()
	})
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			t.Log(line)
			r.mu.Lock()
			r.lines = append(r.lines, elapsed.ReplaceAllString(line, ""))
			close(r.grew)
			r.grew = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	return r
}

// waitFor waits until a line matches re and returns its submatches.
func (r *demoRun) waitFor(t *testing.T, re string, timeout time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for i := 0; ; {
		r.mu.Lock()
		for ; i < len(r.lines); i++ {
			if m := rx.FindStringSubmatch(r.lines[i]); m != nil {
				r.mu.Unlock()
				return m
			}
		}
		grew := r.grew
		r.mu.Unlock()
		select {
		case <-grew:
		case <-r.done:
			r.mu.Lock()
			n := len(r.lines)
			r.mu.Unlock()
			if i == n {
				t.Fatalf("the demo ended without a line matching %q", re)
			}
		case <-deadline:
			t.Fatalf("no line matching %q within %v", re, timeout)
		}
	}
}

// all returns every line, once the demo has ended.
func (r *demoRun) all() []string {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines
}

// children lists the processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := parentOf(p); ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// parentOf returns pid's parent and state, or 0 when pid is gone.
func parentOf(pid int) (int, string) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid ...; comm may hold spaces, so cut at the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 2 {
		return 0, ""
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid, fields[0]
}

// worldOf reads the world's directory from the demo's KUBECONFIG line.
func worldOf(t *testing.T, r *demoRun) (kubeconfig string, tempDir string) {
	t.Helper()
	m := r.waitFor(t, `^  export KUBECONFIG=(\S+)$`, 10*time.Minute)
	return m[1], filepath.Dir(m[1])
}

// checkCleanedUp checks that the demo exited 0 after stopping the world:
// every process it started is gone and the world's directory is removed.
func checkCleanedUp(t *testing.T, r *demoRun, started []int, tempDir string) {
	t.Helper()
	lines := r.all()
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("demo exit: %v", err)
	}
	if !contains(lines, "demo: stopping the agents, the real node, the control plane and the metadata emulators") {
		t.Error("the demo did not say it stopped the world")
	}
	for _, pid := range started {
		if _, state := parentOf(pid); state != "" && state != "Z" {
			t.Errorf("process %d the demo started is still running (%s)", pid, state)
		}
	}
	if _, err := os.Stat(tempDir); !os.IsNotExist(err) {
		t.Errorf("the world's directory %s is still there (%v)", tempDir, err)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// inOrder checks that, for each pattern in turn, a line after the previous
// match matches it, and reports the first that does not.
func inOrder(t *testing.T, lines []string, patterns ...string) {
	t.Helper()
	i := 0
	for _, p := range patterns {
		rx := regexp.MustCompile(p)
		for ; i < len(lines) && !rx.MatchString(lines[i]); i++ {
		}
		if i == len(lines) {
			t.Errorf("no line matching %q after the previous key moment", p)
			return
		}
		i++
	}
}

func count(lines []string, pattern string) int {
	rx := regexp.MustCompile(pattern)
	n := 0
	for _, l := range lines {
		if rx.MatchString(l) {
			n++
		}
	}
	return n
}

// TestDemoShort runs `demo --short` as CI's stand-in for `make demo` and
// checks its timeline for the scenario's key moments, in order, the
// metrics it reads back, and that it leaves nothing behind.
func TestDemoShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes about 90 s")
	}
	r := startDemo(t, "--short")
	kubeconfig, tempDir := worldOf(t, r)
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Errorf("the KUBECONFIG the demo prints: %v", err)
	}
	r.waitFor(t, `^== 1\. `, time.Minute)
	started := children(t, r.cmd.Process.Pid)
	if len(started) < 5+2 { // at least the agents and the aggregators, besides the control plane
		t.Errorf("the demo runs %d child processes, want at least 7", len(started))
	}
	r.waitFor(t, `^demo: scenario done`, 5*time.Minute)
	checkCleanedUp(t, r, started, tempDir)
	lines := r.all()

	const (
		n0, n1, n2, n3, spare = "gke-a3-highgpu-8g-0", "gke-a3-highgpu-8g-1", "gke-a3-highgpu-8g-2", "gke-a3-highgpu-8g-3", "gke-a3-highgpu-8g-4"
	)
	inOrder(t, lines, `^  kubectl get nodes -L cloud.google.com/scheduled-maintenance-time`, `^  agent metrics of `+n0+`: http://127\.0\.0\.1:\d+/metrics$`)
	for _, n := range []string{n0, n1, n2, n3, spare} {
		// The label and the Event are written together; either may be seen first.
		inOrder(t, lines, `^== 1\. Compute Engine schedules`, `^node `+n+`: scheduled-maintenance-time=\d{10}$`)
		inOrder(t, lines, `^== 1\. Compute Engine schedules`, `^event `+n+` MaintenanceWindowScheduled: `)
	}
	// The timeline merges several watches (nodes, pods, Events) and the
	// scenario's own lines, so order is checked within one stream, or
	// across streams only where seconds separate the two moments.
	taint := `, tainted cloud.google.com/impending-node-termination:NoSchedule, cordoned$`

	// 2. Opportunistic: the idle spare is picked and taken through its
	// maintenance before step 3; busy nodes say why they are not.
	inOrder(t, lines, `^event `+n2+` OpportunisticMaintenanceSkipped \(aggregator\): .*pods on it use accelerators`)
	inOrder(t, lines, `^event `+spare+` OpportunisticMaintenanceTriggered \(aggregator\): Picked for opportunistic maintenance`, `^== 3\. `)
	inOrder(t, lines,
		`^node `+spare+`: .*perform-maintenance=true, active-node-maintenance=ONGOING`+taint,
		`^node `+spare+`: .*active-node-maintenance=terminating`+taint,
		`^`+spare+`: the VM stops and boots again$`,
		`^node `+spare+`: in service$`,
		`^== 3\. `)
	for _, n := range []string{n0, n1, n2, n3} {
		if c := count(lines, `^event `+n+` OpportunisticMaintenanceTriggered`); c != 0 {
			t.Errorf("busy node %s picked for opportunistic maintenance %d times", n, c)
		}
	}
	// 3. Manual: a rejected value changes nothing; true drains the trainer
	// with its whole grace, then the system pod, then one call, then the
	// node is terminating.
	inOrder(t, lines,
		`^== 3\. `,
		`^event `+n0+` PerformMaintenanceRejected: The label cloud.google.com/perform-maintenance="yes" is not accepted`,
		`^event `+n0+` CustomerTriggeredMaintenance: cloud.google.com/perform-maintenance=true: draining`,
		`^== 4\. `)
	inOrder(t, lines,
		`^== 3\. `,
		`^node `+n0+`: scheduled-maintenance-time=\d+, perform-maintenance=yes$`,
		`^node `+n0+`: scheduled-maintenance-time=\d+$`,
		`^node `+n0+`: .*perform-maintenance=true, active-node-maintenance=ONGOING`+taint,
		`^node `+n0+`: .*active-node-maintenance=terminating`+taint,
		`^node `+n0+`: in service$`,
		`^== 4\. `)
	inOrder(t, lines,
		`^== 3\. `,
		`^pod ml/trainer-\S+: SIGTERM, 10 s to stop \(on `+n0+`\)$`,
		`^pod kube-system/gpu-metrics-`+n0+`: SIGTERM`,
		`^node `+n0+`: .*active-node-maintenance=terminating`)
	inOrder(t, lines,
		`^== 3\. `,
		`^   Compute Engine received: POST projects/demo-project/zones/us-central1-a/instances/`+n0+`/performMaintenance\?requestId=[0-9a-f-]{36} -> 200$`,
		`^== 4\. `)
	if c := count(lines, `Compute Engine received: POST .*/performMaintenance`); c != 1 {
		t.Errorf("%d performMaintenance calls shown, want 1", c)
	}
	// 4. Host maintenance on a busy node: the PDB is honoured, the trainer
	// gets its whole grace, and the system pod goes only after it.
	inOrder(t, lines, `^== 4\. `, `^event `+n1+` TerminateOnHostMaintenance: `, `^event `+n1+` PodEvictionComplete: `, `^== 5\. `)
	inOrder(t, lines, `^== 4\. `,
		`^node `+n1+`: .*active-node-maintenance=ONGOING`+taint,
		`^node `+n1+`: .*active-node-maintenance=terminating`+taint,
		`^node `+n1+`: in service$`,
		`^== 5\. `)
	inOrder(t, lines, `^== 4\. `,
		`^pod ml/trainer-\S+: SIGTERM, 10 s to stop \(on `+n1+`\)$`,
		`^pod ml/trainer-\S+: gone$`,
		`^pod kube-system/gpu-metrics-`+n1+`: SIGTERM`,
		`^pod kube-system/gpu-metrics-`+n1+`: gone$`)
	inOrder(t, lines, `^== 4\. `,
		`^pod kube-system/gpu-metrics-`+n1+`: SIGTERM`,
		`^`+n1+`: the VM stops and boots again$`,
		`^node `+n1+`: in service$`)
	// The workload notice: every pod told of the pending maintenance; the
	// trainer's loop checkpoints when it starts, seconds (its lead) before
	// its SIGTERM.
	inOrder(t, lines, `^== 1\. `, `^   every pod is told too, .* carries maintenance-handler\.io/notice:$`, `^     MAINTENANCE_PHASE=pending$`,
		`^     MAINTENANCE_WINDOW_START=\d{10}$`, `^== 2\. `)
	inOrder(t, lines, `^== 4\. `, `^   trainer-\S+: checkpointed at a step boundary: maintenance starting, eviction at \S+Z$`,
		`^pod ml/trainer-\S+: SIGTERM, 10 s to stop \(on `+n1+`\)$`, `^== 5\. `)
	if c := count(lines, `^   trainer-\S+: checkpointed at a step boundary`); c != 1 {
		t.Errorf("the trainer's loop checkpointed %d times, want once", c)
	}
	// 5. Preemption of the Spot node.
	inOrder(t, lines, `^== 5\. `, `^event `+n3+` NodePreempted: `)
	inOrder(t, lines, `^== 5\. `,
		`^node `+n3+`: .*active-node-maintenance=ONGOING`+taint,
		`^node `+n3+`: .*active-node-maintenance=terminating`+taint,
		`^node `+n3+`: in service$`)
	inOrder(t, lines, `^== 5\. `,
		`^pod ml/trainer-\S+: SIGTERM, 10 s to stop \(on `+n3+`\)$`,
		`^pod kube-system/gpu-metrics-`+n3+`: SIGTERM`,
		`^`+n3+`: the VM stops and boots again$`,
		`^node `+n3+`: in service$`)
	// What the agents' /metrics counted.
	inOrder(t, lines,
		`^== What the agents counted`,
		`^   `+n0+`: MaintenanceEvent/HW/SW Maintenance 1$`,
		`^   `+n1+`: MaintenanceEvent/HW/SW Maintenance 1$`,
		`^   `+n2+`: TerminationEvent/FaultRepair 1$`,
		`^   `+n3+`: PreemptionEvent/Eviction 1$`,
		`^   `+spare+`: MaintenanceEvent/HW/SW Maintenance 1$`,
		`^   gke-v5p-slice-0: none$`,
		`^   gke-v5p-slice-1: PreemptionEvent/Eviction 1$`,
		`^   gke-v5p-slice-2: none$`,
		`^== What the aggregator counted`,
		`^   slice v5p-slice: PreemptionEvent/Eviction 1$`,
		`^== kubectl gce-maintenance status`,
		`^   NODE +POOL +WINDOW +PHASE`,
		`^   `+n2+` +a3-highgpu-8g +- +Idle `,
		`^   POOL +NODES +PENDING`,
		`^   a3-highgpu-8g +5 +`,
		`^demo: scenario done`)
	// 6. The multi-host slice: one host preempted, every host drained with
	// it and back with it.
	inOrder(t, lines, `^== 6\. `, `^event gke-v5p-slice-1 NodePreempted: `)
	for _, h := range []string{"gke-v5p-slice-0", "gke-v5p-slice-2", "gke-v5p-slice-3"} {
		inOrder(t, lines, `^== 6\. `,
			`^event `+h+` SliceMaintenanceDrain: Host gke-v5p-slice-1 of the multi-host slice v5p-slice stops \(preemption\)`,
			`^event `+h+` SliceMaintenanceOver: `)
		inOrder(t, lines, `^== 6\. `,
			`^node `+h+`: active-node-maintenance=ONGOING`+taint[:len(taint)-1]+`, slice v5p-slice down with gke-v5p-slice-1`,
			`^node `+h+`: in service$`,
			`^   gke-v5p-slice-1 is back: every host of the slice is back in service$`)
	}
	inOrder(t, lines, `^== 6\. `, `^gke-v5p-slice-1: the VM stops and boots again$`, `^node gke-v5p-slice-1: in service$`)
	// 7. A GPU fails: the node is tainted faulty, drained in order (the
	// trainer with its grace), reported once, and back in service.
	inOrder(t, lines,
		`^== 7\. A GPU of `+n2+` falls off the bus`,
		`^event `+n2+` FaultRepairApproved \(aggregator\): The node is faulty \(UNRECOVERABLE_GPU_ERROR, condition: the node condition GPUUnhealthy has been True for 5s or more\)`,
		`^event `+n2+` FaultRepairStarted: `,
		`^event `+n2+` FaultReported: Compute Engine took the host's repair \(reportHostAsFaulty, operation `,
		`^event `+n2+` FaultRepaired: `)
	inOrder(t, lines, `^== 7\. `,
		`^node `+n2+`: .*active-node-maintenance=ONGOING, tainted cloud.google.com/impending-node-termination:NoSchedule, tainted status-taint.cluster-autoscaler.kubernetes.io/maintenance-handler-faulty:NoSchedule, cordoned$`,
		`^pod ml/trainer-\S+: SIGTERM, 10 s to stop \(on `+n2+`\)$`,
		`^   Compute Engine received: POST projects/demo-project/zones/us-central1-a/instances/`+n2+`/reportHostAsFaulty\?requestId=[0-9a-f-]{36} \{UNRECOVERABLE_GPU_ERROR, "maintenance-handler: condition: the node condition GPUUnhealthy has been True for 5s or more"\} -> 200$`,
		`^`+n2+`: the VM stops and boots again$`,
		`^   `+n2+` is back on a repaired host, in service$`)
	if c := count(lines, `Compute Engine received: POST .*/reportHostAsFaulty`); c != 1 {
		t.Errorf("%d reports shown, want 1", c)
	}
	// 8. The real node, where the machine runs one: the trainer's own
	// output shows the checkpoint when told, then the real SIGTERM.
	if err := testworld.RealNodeSupport(); err != nil {
		inOrder(t, lines, `^demo: no real node on this machine`)
		return
	}
	inOrder(t, lines,
		`^== 8\. A real node: gke-a3-real-0 runs a kubelet and containerd`,
		`^event gke-a3-real-0 TerminateOnHostMaintenance: `,
		`^   real-trainer \(container output\): checkpointed at a step boundary: maintenance starting, eviction at `,
		`^   real-trainer \(container output\): SIGTERM received: stopping, the checkpoint is saved$`,
		`^event gke-a3-real-0 PodEvictionComplete: `)
	inOrder(t, lines, `^== 8\. `, `^pod ml/real-trainer: SIGTERM, 10 s to stop \(on gke-a3-real-0\)$`, `^node gke-a3-real-0: active-node-maintenance=terminating`)
	if c := count(lines, `^   real-trainer \(container output\): checkpointed at a step boundary`); c != 1 {
		t.Errorf("the real trainer checkpointed %d times, want once", c)
	}
}

// TestDemoCtrlC interrupts the demo in the middle of its scenario, as a
// user's Ctrl-C does: it stops everything it started and exits 0.
func TestDemoCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a test world")
	}
	r := startDemo(t, "--short")
	_, tempDir := worldOf(t, r)
	r.waitFor(t, `^== 2\. `, 2*time.Minute)
	started := children(t, r.cmd.Process.Pid)
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		t.Fatal("the demo did not end within 2 minutes of Ctrl-C")
	}
	checkCleanedUp(t, r, started, tempDir)
	if contains(r.all(), "demo: scenario done (run with `make demo DEMO_FLAGS=--keep` to explore afterwards)") {
		t.Error("the interrupted demo says its scenario is done")
	}
}
