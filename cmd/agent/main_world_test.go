package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(vms.RunMain(m, &world)) }

func TestValidateReportsEveryProblem(t *testing.T) {
	o := NewOptions()
	o.NodeName = ""
	o.PodName = "agent-x"
	o.MetadataTimeout = 1500 * time.Millisecond
	o.UnhealthyAfter = 5 * time.Second
	o.PreemptionDeadline = 0
	o.LogLevel = "chatty"
	o.NoticeListenAddress = "8189"
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--node-name", "--pod-name and --pod-namespace", "whole seconds", "--unhealthy-after", "--preemption-deadline", "--log-level", "--notice-listen-address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
	o = NewOptions()
	o.NodeName = "n"
	if err := o.Validate(); err != nil {
		t.Errorf("defaults with a node name: %v", err)
	}
}

// agentProc is the agent binary running against the test world.
type agentProc struct {
	cmd     *exec.Cmd
	addr    string
	logPath string
	exited  chan struct{} // closed when the process has exited
	err     error         // its exit error, once exited
}

func buildAgent(t testing.TB) string {
	t.Helper()
	dir, err := vms.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "agent")
}

func runAgent(t testing.TB, node string, emu *gceemu.Server, args ...string) *agentProc {
	t.Helper()
	addr := testworld.FreeAddrT(t)
	// The agent alone, calling Compute Engine with its VM's own token (no
	// aggregator runs here to make the calls).
	kubeconfig, err := world.AgentKubeconfig(testworld.Ctx(t, 30*time.Second), node, args...)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--kubeconfig", kubeconfig, "--node-name", node, "--metadata-host", emu.Host(),
		"--listen-address", addr, "--log-level", "warn", "--compute-caller", "node"}, args...)
	cmd, err := testworld.ProductCommand(buildAgent(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, addr: addr, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", log)
		}
	})
	return p
}

// log returns what the agent has logged so far.
func (p *agentProc) log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (p *agentProc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func setup(t testing.TB, name string) *gceemu.Server {
	t.Helper()
	world.NodeT(t, testworld.NodeSpec{Name: name})
	emu := gceemu.StartT(t, gceemu.Config{Name: name})
	return emu
}

func poll(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestHealthzTellsTheTruth runs the agent binary, makes every metadata
// request fail, and watches /healthz go bad and come back, with the agent
// running throughout and the node untouched.
func TestHealthzTellsTheTruth(t *testing.T) {
	testworld.Need(t)
	const node = "bin-health-0"
	emu := setup(t, node)
	p := runAgent(t, node, emu, "--metadata-timeout", "1s", "--unhealthy-after", "12s")
	poll(t, "healthy at start", 30*time.Second, func() bool { code, _ := p.get("/healthz"); return code == 200 })
	for _, key := range []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance} {
		emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + key, Kind: gceemu.FaultStatus, Status: 503})
	}
	poll(t, "unhealthy while the metadata server fails", time.Minute, func() bool { code, _ := p.get("/healthz"); return code == 503 })
	_, body := p.get("/healthz")
	if !strings.Contains(body, metadata.KeyMaintenanceEvent) {
		t.Errorf("/healthz body %q does not name the failing key", body)
	}
	// A Warning Event says so, once per key, and the metric.
	poll(t, "a MetadataUnhealthy Event for maintenance-event", time.Minute, func() bool {
		return len(nodeEventMessages(t, node, protocol.EventMetadataUnhealthy, metadata.KeyMaintenanceEvent)) > 0
	})
	// The gauge is set before the Event is recorded.
	_, m := p.get("/metrics")
	if v := metricValue(t, m, "maintenance_handler_agent_metadata_key_healthy", map[string]string{"key": metadata.KeyMaintenanceEvent, "node_name": node}); v != 0 {
		t.Errorf("metadata_key_healthy{maintenance-event} = %v while it fails, want 0", v)
	}
	emu.ClearFaults()
	poll(t, "healthy again", time.Minute, func() bool { code, _ := p.get("/healthz"); return code == 200 })
	poll(t, "a MetadataRecovered Event for maintenance-event", time.Minute, func() bool {
		return len(nodeEventMessages(t, node, protocol.EventMetadataRecovered, metadata.KeyMaintenanceEvent)) > 0
	})
	if got := nodeEventMessages(t, node, protocol.EventMetadataUnhealthy, metadata.KeyMaintenanceEvent); len(got) != 1 {
		t.Errorf("MetadataUnhealthy Events for maintenance-event: %q, want one", got)
	}
	select {
	case <-p.exited:
		t.Fatalf("agent exited: %v", p.err)
	default:
	}
	_, m = p.get("/metrics")
	if metricValue(t, m, "maintenance_handler_agent_metadata_key_healthy", map[string]string{"key": metadata.KeyMaintenanceEvent, "node_name": node}) != 1 {
		t.Error("metadata_key_healthy{maintenance-event} is not back to 1 after its MetadataRecovered Event")
	}
	if metricValue(t, m, "maintenance_handler_agent_metadata_requests_total", map[string]string{"key": "instance/maintenance-event", "result": "server_error", "node_name": node}) < 1 {
		t.Error("/metrics has no server_error count for maintenance-event")
	}
	n, err := world.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if protocol.HasTaint(n) || n.Spec.Unschedulable {
		t.Error("metadata failures drained the node")
	}
	// SIGTERM: a clean exit.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("exit after SIGTERM: %v", p.err)
		}
	case <-time.After(10 * time.Second):
		t.Error("agent did not exit on SIGTERM")
	}
}

// nodeEventMessages returns the messages of node's Events with reason whose
// message contains part (each Event once, whatever its count).
func nodeEventMessages(t testing.TB, node, reason, part string) []string {
	t.Helper()
	list, err := world.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if strings.Contains(e.Message, part) {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestWaitsForItsNodeAndSaysWhy: started before its Node exists, the agent
// serves /healthz (unhealthy, saying why) and logs what it waits for; once
// the Node is registered it runs and is healthy.
func TestWaitsForItsNodeAndSaysWhy(t *testing.T) {
	testworld.Need(t)
	const node = "bin-late-0"
	emu := gceemu.StartT(t, gceemu.Config{Name: node})
	p := runAgent(t, node, emu, "--metadata-timeout", "1s", "--unhealthy-after", "12s")
	var code int
	var body string
	poll(t, "/healthz says the node is not registered yet", 30*time.Second, func() bool {
		code, body = p.get("/healthz")
		return strings.Contains(body, "not registered yet")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, node) {
		t.Errorf("/healthz while the node does not exist: %d %q, want 503 naming the node", code, body)
	}
	poll(t, "the log says what it waits for", 30*time.Second, func() bool {
		return strings.Contains(p.log(t), `"msg":"waiting for the node"`)
	})
	world.NodeT(t, testworld.NodeSpec{Name: node})
	poll(t, "healthy once the node exists", time.Minute, func() bool { code, _ := p.get("/healthz"); return code == 200 })

	// An identity that may not read Nodes: the same, with that reason.
	ns := world.Namespace(t)
	var token string
	poll(t, "a token for the namespace's default service account", time.Minute, func() bool {
		tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err == nil {
			token = tr.Status.Token
		}
		return err == nil
	})
	cfg := rest.AnonymousClientConfig(world.Config)
	cfg.BearerToken = token
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testworld.WriteKubeconfig(kubeconfig, cfg); err != nil {
		t.Fatal(err)
	}
	denied := runAgent(t, node, emu, "--kubeconfig", kubeconfig)
	poll(t, "/healthz says the agent may not read its node", 30*time.Second, func() bool {
		code, body := denied.get("/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "may not read it")
	})
}

// idleRSSBudgetMiB is the resident memory the agent is held to, idle with
// 110 pods on its node (printed beside the measure, not asserted: a
// benchmark measures, a test does not time).
const idleRSSBudgetMiB = 24

// BenchmarkAgentIdle runs the agent binary with a notice pending and
// reports its resident memory and CPU use while nothing happens.
func BenchmarkAgentIdle(b *testing.B) {
	testworld.Need(b)
	const node = "bin-idle-0"
	emu := setup(b, node)
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 24, 3, 0, 0, 0, time.UTC), 4*time.Hour))
	p := runAgent(b, node, emu)
	poll(b, "labelled", 30*time.Second, func() bool {
		n, err := world.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && n.Labels[protocol.LabelScheduledMaintenanceTime] != ""
	})
	const window = 10 * time.Second
	var rssKiB, cpu float64
	for b.Loop() {
		t0 := cpuTicks(b, p.cmd.Process.Pid)
		time.Sleep(window)
		t1 := cpuTicks(b, p.cmd.Process.Pid)
		cpu = float64(t1-t0) / 100 / window.Seconds() * 100 // percent of one core (USER_HZ = 100)
		rssKiB = rss(b, p.cmd.Process.Pid)
	}
	b.ReportMetric(rssKiB/1024, "RSS-MiB")
	b.ReportMetric(cpu, "CPU-%")
	fmt.Printf("agent idle with a notice pending: RSS %.1f MiB, CPU %.2f%% of one core over %s\n", rssKiB/1024, cpu, window)
}

func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

// rssParts is the resident memory that is the process's own (heap,
// stacks: RssAnon) and the part mapped from its binary (RssFile), in KiB.
func rssParts(b *testing.B, pid int) (anon, file float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		for name, v := range map[string]*float64{"RssAnon:": &anon, "RssFile:": &file} {
			if rest, ok := strings.CutPrefix(line, name); ok {
				*v, _ = strconv.ParseFloat(strings.Fields(rest)[0], 64)
			}
		}
	}
	return anon, file
}

func rss(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			kib, _ := strconv.ParseFloat(f[0], 64)
			return kib
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// TestKilledMidDrainDrainsOnce SIGKILLs the agent binary while it drains and
// starts a new one: the drain completes, counted and announced once.
func TestKilledMidDrainDrainsOnce(t *testing.T) {
	testworld.Need(t)
	const node = "bin-kill-0"
	emu := setup(t, node)
	ns := "default"
	grace := int64(6)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow-" + node,
			Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: "6s"}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/trainer:1"}}},
	}
	if _, err := world.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := runAgent(t, node, emu)
	poll(t, "first agent healthy", 30*time.Second, func() bool { code, _ := first.get("/healthz"); return code == 200 })
	emu.SetMaintenanceEvent(gceemu.EventTerminate)
	poll(t, "drain under way", 30*time.Second, func() bool {
		p, err := world.Client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil
	})
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	second := runAgent(t, node, emu)
	poll(t, "terminating", time.Minute, func() bool {
		n, err := world.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating
	})
	if _, err := world.Client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("terminating while the pod remains: %v", err)
	}
	_, m := second.get("/metrics")
	// The restarted agent continues the node's total: one, not two.
	if metricValue(t, m, "maintenance_handler_agent_interruptions_total", map[string]string{"interruption_reason": "HW/SW Maintenance", "interruption_type": "MaintenanceEvent", "node_name": node, "node_pool_name": "default-pool"}) != 1 {
		t.Errorf("the restarted agent does not report the node's one interruption:\n%s", grep(m, "interruptions_total"))
	}
	n, err := world.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := world.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(n.UID) + ",reason=" + protocol.EventTerminateOnHost})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, e := range events.Items {
		count += int(max(e.Count, 1))
	}
	if count != 1 {
		t.Errorf("%d %s Events, want 1", count, protocol.EventTerminateOnHost)
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestManualTriggerThroughTheBinary: the binary finds its VM, takes the
// token from --metadata-host and calls --compute-endpoint once.
func TestManualTriggerThroughTheBinary(t *testing.T) {
	testworld.Need(t)
	const node = "bin-manual-0"
	emu := setup(t, node)
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 24, 3, 0, 0, 0, time.UTC), 4*time.Hour))
	p := runAgent(t, node, emu, "--compute-endpoint", emu.ComputeEndpoint())
	getNode := func() *corev1.Node {
		n, err := world.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	poll(t, "labelled", 30*time.Second, func() bool { return getNode().Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n := getNode()
		n.Labels[protocol.LabelPerformMaintenance] = protocol.TriggerValue
		_, err := world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "terminating", time.Minute, func() bool { return getNode().Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating })
	calls := emu.Calls()
	cfg := emu.Config()
	if len(calls) != 1 || calls[0].Project != cfg.Project || calls[0].Zone != cfg.Zone || calls[0].Instance != cfg.Name || calls[0].Token != emu.AccessToken() {
		t.Errorf("calls %+v; want one for %s/%s/%s with token %q", calls, cfg.Project, cfg.Zone, cfg.Name, emu.AccessToken())
	}
	// The agent counts a decision after it has written the Node: the
	// count comes a moment after the label.
	accepted := func() (float64, string) {
		_, m := p.get("/metrics")
		return metricValue(t, m, "maintenance_handler_agent_manual_triggers_total", map[string]string{"outcome": "accepted"}), m
	}
	poll(t, "the acceptance counted", time.Minute, func() bool { v, _ := accepted(); return v >= 1 })
	if v, m := accepted(); v != 1 {
		t.Errorf("manual_triggers_total{accepted} = %v, want 1:\n%s", v, grep(m, "manual_triggers_total"))
	}
}

// metricValue is the value of the series of family name whose labels
// include want in the text exposition; -1 when there is none.
func metricValue(t testing.TB, text, name string, want map[string]string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	f, ok := families[name]
	if !ok {
		return -1
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// BenchmarkAgentBinaryDrain110Pods runs the agent binary as it ships (its
// own API client settings) on a node with 110 pods: 103 workload pods with
// graces of 0-10 s, 3 of them under a PodDisruptionBudget, 5 kube-system
// pods and 2 DaemonSet pods. It reports the idle agent's RSS with them on
// its node, then preempts the VM (30 s) and reports when the workload pods
// were gone and when the node was labelled terminating.
func BenchmarkAgentBinaryDrain110Pods(b *testing.B) {
	testworld.Need(b)
	const node, workload = "bin-drain-110", 103
	emu := setup(b, node)
	ctx := context.Background()
	ns := world.Namespace(b)
	pods := nodePods{b: b, node: node}
	for i := range workload {
		var labels map[string]string
		if i < 3 {
			labels = map[string]string{"app": "guarded"}
		}
		pods.create(pods.pod(ns, fmt.Sprintf("work-%d", i), int64(i%11), labels))
	}
	one := intstr.FromInt32(1)
	if _, err := world.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pods.system(5)
	pods.daemonSets(ns, 2)
	pods.waitReady(workload + 5 + 2)
	p := runAgent(b, node, emu)
	poll(b, "agent healthy", 30*time.Second, func() bool { code, _ := p.get("/healthz"); return code == 200 })
	const window = 10 * time.Second
	var rssKiB, cpu float64
	var workGone, terminating time.Duration
	var anonKiB, fileKiB float64
	for b.Loop() {
		t0 := cpuTicks(b, p.cmd.Process.Pid)
		time.Sleep(window)
		cpu = float64(cpuTicks(b, p.cmd.Process.Pid)-t0) / 100 / window.Seconds() * 100
		rssKiB = rss(b, p.cmd.Process.Pid)
		anonKiB, fileKiB = rssParts(b, p.cmd.Process.Pid)

		w, err := world.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			b.Fatal(err)
		}
		nw, err := world.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		emu.SetPreempted(true)
		gone := 0
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted && strings.HasPrefix(pod.Name, "work-") {
				if gone++; gone == workload {
					workGone = time.Since(start)
					break
				}
			}
		}
		w.Stop()
		for ev := range nw.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && n.Labels[protocol.LabelActiveMaintenance] == protocol.ValueTerminating {
				terminating = time.Since(start)
				break
			}
		}
		nw.Stop()
	}
	b.ReportMetric(rssKiB/1024, "idle-RSS-MiB")
	b.ReportMetric(anonKiB/1024, "idle-RSS-anon-MiB")
	b.ReportMetric(fileKiB/1024, "idle-RSS-file-MiB")
	b.ReportMetric(workGone.Seconds(), "workload-gone-s")
	b.ReportMetric(terminating.Seconds(), "terminating-s")
	verdict := "met"
	if rssKiB/1024 > idleRSSBudgetMiB {
		verdict = "over"
	}
	fmt.Printf("agent binary, node with 110 pods: idle RSS %.1f MiB (budget %d MiB: %s), CPU %.2f%% of one core; preempted (30 s): %d workload pods gone after %s, terminating after %s\n",
		rssKiB/1024, idleRSSBudgetMiB, verdict, cpu, workload, workGone.Round(10*time.Millisecond), terminating.Round(10*time.Millisecond))
}

// BenchmarkAgentIdleNoNotice runs the agent binary with nothing scheduled,
// for each form the metadata server's "no notice" takes, and reports the
// metadata requests it makes and its CPU while nothing changes. It runs
// with --metadata-timeout 2s so that a minute's worth of polls at the
// default 60 s fits in seconds: requests scale with 1/timeout.
func BenchmarkAgentIdleNoNotice(b *testing.B) {
	testworld.Need(b)
	for _, form := range []struct {
		name string
		cfg  gceemu.Config
	}{
		{"empty-object", gceemu.Config{Absence: gceemu.AbsentEmptyObject}},
		{"NONE", gceemu.Config{Absence: gceemu.AbsentNone}},
		{"404", gceemu.Config{Absence: gceemu.AbsentNotFound}},
		{"503-no-notifications", gceemu.Config{Absence: gceemu.AbsentUnavailable}},
		{"no-ETag", gceemu.Config{NoETag: true}},
		{"no-long-poll", gceemu.Config{NoLongPoll: true}},
	} {
		b.Run(form.name, func(b *testing.B) {
			node := "bin-nonotice-" + strings.ToLower(form.name)
			world.NodeT(b, testworld.NodeSpec{Name: node})
			cfg := form.cfg
			cfg.Name = node
			emu := gceemu.StartT(b, cfg)
			p := runAgent(b, node, emu, "--metadata-timeout", "2s", "--unhealthy-after", "30s")
			poll(b, "agent healthy", 30*time.Second, func() bool { code, _ := p.get("/healthz"); return code == 200 })
			const window = 20 * time.Second
			var perTimeout, cpu float64
			for b.Loop() {
				r0, t0 := emu.Requests(), cpuTicks(b, p.cmd.Process.Pid)
				time.Sleep(window)
				perTimeout = float64(emu.Requests()-r0) / (window.Seconds() / 2)
				cpu = float64(cpuTicks(b, p.cmd.Process.Pid)-t0) / 100 / window.Seconds() * 100
			}
			b.ReportMetric(perTimeout, "requests/timeout")
			b.ReportMetric(cpu, "CPU-%")
			fmt.Printf("idle agent, no notice as %s: %.1f metadata requests per poll timeout for 3 keys (= per minute at the default 60 s), CPU %.2f%% of one core\n",
				form.name, perTimeout, cpu)
		})
	}
}

// TestServesTheNoticeToThePods: the agent binary, with
// --notice-listen-address, serves the maintenance keys as it reads them:
// a client on the node that long-polls them with the official metadata
// client, unchanged (the agent's own watcher, pointed at the agent by
// GCE_METADATA_HOST), hears the notice, its change to ONGOING and the
// preemption as the metadata server shows them; and the drain's deadline
// once the agent drains.
func TestServesTheNoticeToThePods(t *testing.T) {
	testworld.Need(t)
	emu, notice, heard := servingNotice(t, "agent-serves-notice", 5*time.Second)
	ctx := testworld.Ctx(t, 2*time.Minute)
	upcoming, preempted, deadline := heard(ctx, metadata.KeyUpcomingMaintenance), heard(ctx, metadata.KeyPreempted), heard(ctx, metadata.KeyDeadline)
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
	awaitAnswer(t, ctx, upcoming, "the notice", func(a metadata.Answer) bool {
		n, present, err := maintenance.ParseNotice(a.Value)
		return err == nil && present && n.Status == maintenance.StatusPending && n.WindowStart.Equal(start)
	})
	emu.SetNoticeStatus(gceemu.StatusOngoing)
	awaitAnswer(t, ctx, upcoming, "the notice ONGOING", func(a metadata.Answer) bool {
		n, present, err := maintenance.ParseNotice(a.Value)
		return err == nil && present && n.Status == maintenance.StatusOngoing
	})
	emu.SetPreempted(true)
	awaitAnswer(t, ctx, preempted, "the preemption", func(a metadata.Answer) bool { p, err := maintenance.ParsePreempted(a.Value); return err == nil && p })
	awaitAnswer(t, ctx, deadline, "the drain's deadline", func(a metadata.Answer) bool {
		_, err := time.Parse(time.RFC3339, a.Value)
		return !a.Absent && err == nil
	})
	// The VM's metadata server hangs: the node still answers, at once,
	// with what the agent last read.
	emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + metadata.KeyUpcomingMaintenance, Kind: gceemu.FaultHang})
	emu.ResetETags() // the agent's long poll answers, and its next one hangs
	quick, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(quick, http.MethodGet, "http://"+notice+metadata.MirrorPrefix+metadata.KeyUpcomingMaintenance+"?alt=json", nil)
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("with the metadata server hung: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n, present, err := maintenance.ParseNotice(string(body)); resp.StatusCode != http.StatusOK || err != nil || !present || n.Status != maintenance.StatusOngoing {
		t.Errorf("with the metadata server hung: %d %q, want the ONGOING notice", resp.StatusCode, body)
	}

	// Nothing else is served.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+notice+metadata.MirrorPrefix+"instance/service-accounts/default/token", nil)
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the token: %d, want 404", resp.StatusCode)
	}
}

// servingNotice runs the agent binary for a new node with the notice
// endpoint, and returns the node's emulator, the endpoint's address and a
// pod's client of it: heard long-polls a key with the official client
// (the agent's own watcher, with a long poll of timeout, its requests sent
// to the endpoint), and hands on every answer.
func servingNotice(tb testing.TB, node string, timeout time.Duration) (*gceemu.Server, string, func(context.Context, string) <-chan metadata.Answer) {
	tb.Helper()
	world.NodeT(tb, testworld.NodeSpec{Name: node})
	emu := gceemu.StartT(tb, gceemu.Config{Name: node})
	notice := testworld.FreeAddrT(tb)
	runAgent(tb, node, emu, "--notice-listen-address", notice)
	w := metadata.NewWatcher(metadata.WatcherOptions{Client: metadata.NewClient(timeout, notice), Timeout: timeout,
		Backoff: backoff.Policy{Base: 50 * time.Millisecond, Max: time.Second}})
	return emu, notice, func(ctx context.Context, key string) <-chan metadata.Answer {
		ch := make(chan metadata.Answer, 16)
		go func() {
			_ = w.Watch(ctx, key, func(_ context.Context, a metadata.Answer) bool { ch <- a; return true })
		}()
		return ch
	}
}

// awaitAnswer waits on ch for an answer that ok accepts.
func awaitAnswer(tb testing.TB, ctx context.Context, ch <-chan metadata.Answer, what string, ok func(metadata.Answer) bool) {
	tb.Helper()
	for {
		select {
		case a := <-ch:
			if ok(a) {
				return
			}
		case <-ctx.Done():
			tb.Fatalf("the pod's client never heard %s", what)
		}
	}
}
