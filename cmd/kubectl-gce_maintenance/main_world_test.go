package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(vms.RunMain(m, &world)) }

var update = flag.Bool("update", false, "rewrite the golden files")

// t0 is the tests' now.
var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// kubectl runs the plugin with args against the test world, at t0 (or
// at now when live), and returns its exit code and output.
func kubectl(t *testing.T, live bool, stdin string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	flags := newKubeFlags()
	a := &app{flags: flags, now: func() time.Time { return t0 }, loc: time.UTC, out: &out, errOut: &out, in: strings.NewReader(stdin)}
	if live {
		a.now = time.Now
	}
	code := a.run(testworld.Ctx(t, 3*time.Minute), append([]string{"--kubeconfig", world.Kubeconfig}, args...))
	return code, out.String()
}

// publish writes what an agent would on node: its state and a notice.
func publish(t testing.TB, name string, change func(n *corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[protocol.AnnotationLastBootID] = "boot-1"
		change(n)
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func pendingNotice(start time.Time, canReschedule bool) string {
	r := "true"
	if !canReschedule {
		r = "false"
	}
	return `{"can_reschedule":` + r + `,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"` + start.Format(time.RFC3339) + `"}`
}

func event(t *testing.T, node, source, reason, message string, at time.Time) {
	t.Helper()
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: node + ".", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, APIVersion: "v1"},
		Reason:         reason, Message: message, Source: corev1.EventSource{Component: source}, Type: corev1.EventTypeNormal,
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1}
	if source == protocol.EventSourceAgent {
		e.Source.Host = node // an agent reports from its node
	}
	if _, err := world.Client.CoreV1().Events("default").Create(testworld.Ctx(t, 10*time.Second), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestNotInstalledIsSaid: on a cluster where no agent ever wrote its keys,
// every command says the project does not seem installed, and exits 1. It
// is the file's first test: the later ones publish the agents' keys.
func TestNotInstalledIsSaid(t *testing.T) {
	testworld.Need(t)
	world.NodeT(t, testworld.NodeSpec{Name: "bare-0"})
	code, out := kubectl(t, false, "", "status")
	if code != exitError || !strings.Contains(out, "is it installed on this cluster") {
		t.Errorf("exit %d, %q; want 1 saying the project is not installed", code, out)
	}
}

// TestStatusGolden: a scripted pool, as the agents and the aggregator
// publish it; the table, the pool's line (the cap beside the voluntary
// maintenances it bounds) and the cluster's cap are as the golden file
// says; PODS LEFT counts the pods the drain will stop, not the agent's own.
func TestStatusGolden(t *testing.T) {
	testworld.Need(t)
	for _, name := range []string{"km-0", "km-1", "km-2"} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "golden"})
	}
	cfg := "node-idle-time=600s,min-nodes=1,window=2419200s"
	publish(t, "km-0", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationOpportunisticConfig] = cfg
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(t0.Add(76*time.Hour), true)
		n.Annotations[protocol.AnnotationIdleSince] = t0.Add(-2 * time.Hour).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationInterruptions] = `{"MaintenanceEvent/HW/SW Maintenance":1}`
	})
	publish(t, "km-1", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationOpportunisticConfig] = cfg
		n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining)
		n.Annotations[protocol.AnnotationReason] = string(protocol.ReasonHostMaintenance)
		n.Annotations[protocol.AnnotationStarted] = t0.Add(-5 * time.Minute).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationDeadline] = t0.Add(55 * time.Minute).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationBusy] = protocol.BusyAccelerators
		n.Labels[protocol.LabelActiveMaintenance] = protocol.ValueOngoing
	})
	publish(t, "km-2", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationOpportunisticConfig] = cfg
		n.Annotations[protocol.AnnotationBusy] = protocol.BusyAccelerators
	})
	grace := int64(60)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trainer-km-1", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "km-1", TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods("default").Create(testworld.Ctx(t, 10*time.Second), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	// The agent's own pod, which its drain never stops: not a pod left.
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-km-1", Namespace: "default",
		Labels: map[string]string{"app.kubernetes.io/name": "maintenance-handler", "app.kubernetes.io/component": "agent"}},
		Spec: corev1.PodSpec{NodeName: "km-1", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods("default").Create(testworld.Ctx(t, 10*time.Second), agentPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Pods("default").Delete(context.Background(), agentPod.Name, metav1.DeleteOptions{})
	})
	event(t, "km-0", protocol.EventSourceAggregator, protocol.EventSkipped, "Not picked for opportunistic maintenance: the pool golden must keep min-nodes=1 nodes Ready and out of maintenance (1 are)", t0.Add(-time.Minute))

	code, out := kubectl(t, false, "", "status", "--pool", "golden")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	golden := filepath.Join("testdata", "status.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("status:\n%s\nwant (%s):\n%s", out, golden, want)
	}
	code, out = kubectl(t, false, "", "status", "km-1", "-o", "json")
	if code != exitOK || !strings.Contains(out, `"podsLeft": 1`) || !strings.Contains(out, `"phase": "Draining"`) || strings.Contains(out, `"node": "km-0"`) {
		t.Errorf("-o json of km-1: exit %d, %s", code, out)
	}
	if code, out := kubectl(t, false, "", "status", "no-such-node"); code != exitError || !strings.Contains(out, `node "no-such-node" not found`) {
		t.Errorf("a node that does not exist: exit %d, %q", code, out)
	}
	if code, out := kubectl(t, false, "", "status", "-o", "xml"); code != exitUsage || !strings.Contains(out, "want json, yaml or wide") {
		t.Errorf("-o xml: exit %d, %q", code, out)
	}
}

// TestWhySaysEachReason: why, for a node skipped for each reason the
// aggregator gives (its Event's words, as it writes them), in maintenance,
// cooling down, and with none.
func TestWhySaysEachReason(t *testing.T) {
	testworld.Need(t)
	for reason, msg := range map[fleet.Reason]string{
		fleet.ReasonNotIdle:          "Not picked for opportunistic maintenance: pods on it use accelerators",
		fleet.ReasonIdleTooShort:     "Not picked for opportunistic maintenance: idle for 1m0s, less than node-idle-time=600s",
		fleet.ReasonMinNodes:         "Not picked for opportunistic maintenance: the pool why must keep min-nodes=3 nodes Ready and out of maintenance (3 are)",
		fleet.ReasonMaxVoluntary:     "Not picked for opportunistic maintenance: the pool why has as many nodes in voluntary maintenance as its cap allows",
		fleet.ReasonOutsideWindow:    "Not picked for opportunistic maintenance: outside the maintenance window",
		fleet.ReasonExcluded:         `Not picked for opportunistic maintenance: inside the maintenance exclusion "freeze"`,
		fleet.ReasonAutoscaled:       "Not picked for opportunistic maintenance: the cluster autoscaler manages the pool why",
		fleet.ReasonNotEvictable:     "Not picked for opportunistic maintenance: a pod on it is annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false",
		fleet.ReasonOptedOut:         "Not picked for opportunistic maintenance: it is labelled cloud.google.com/opportunistic-disable=true",
		fleet.ReasonNotReschedulable: "Not picked for opportunistic maintenance: its maintenance cannot be rescheduled (can_reschedule false)",
		fleet.ReasonTooEarly:         "Not picked for opportunistic maintenance: its maintenance at 2026-11-25T12:00:00Z is more than window=86400s away",
		fleet.ReasonNotReady:         "Not picked for opportunistic maintenance: the node is not Ready",
		fleet.ReasonSliceIncomplete:  "Not picked for opportunistic maintenance: the multi-host TPU slice why is maintained whole, and not every node of it can go now",
		fleet.ReasonInvalidConfig:    "Not picked for opportunistic maintenance: the pool's configuration is invalid: min-nodes is required",
		fleet.ReasonCoolingDown:      "Not picked for opportunistic maintenance: its last voluntary maintenance failed (permission_denied, 1 in a row)",
		fleet.ReasonGKEHandles:       "Not picked by maintenance-handler's aggregator: GKE's own maintenance handler acts on node.gke.io/opportunistic-config on this node",
	} {
		name := "why-" + strings.ReplaceAll(string(reason), "_", "-")
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "why"})
		publish(t, name, func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(t0.Add(48*time.Hour), true)
		})
		event(t, name, protocol.EventSourceAggregator, protocol.EventSkipped, msg, t0.Add(-time.Minute))
		code, out := kubectl(t, false, "", "why", name)
		if code != exitOK || !strings.Contains(out, "has a maintenance scheduled for 2026-11-25T12:00:00Z (in 2d0h)") || !strings.Contains(out, msg) {
			t.Errorf("why %s (%s): exit %d, %q", name, reason, code, out)
		}
	}
	world.NodeT(t, testworld.NodeSpec{Name: "why-draining", Pool: "why"})
	publish(t, "why-draining", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining)
		n.Annotations[protocol.AnnotationReason] = string(protocol.ReasonSlice)
		n.Annotations[protocol.AnnotationStarted] = t0.Format(time.RFC3339)
		n.Annotations[protocol.AnnotationDeadline] = t0.Add(30 * time.Second).Format(time.RFC3339)
		n.Annotations[protocol.AnnotationSliceMaintenance] = `{"slice":"v5p","cause":"host-b","reason":"preemption","started":"` + t0.Format(time.RFC3339) + `","deadline":"` + t0.Add(30*time.Second).Format(time.RFC3339) + `"}`
	})
	if _, out := kubectl(t, false, "", "why", "why-draining"); !strings.Contains(out, "is in maintenance: Draining for slice") || !strings.Contains(out, "Host host-b of its multi-host slice v5p stops (preemption)") {
		t.Errorf("why a slice host drains: %q", out)
	}
	world.NodeT(t, testworld.NodeSpec{Name: "why-gke", Pool: "why"})
	publish(t, "why-gke", func(n *corev1.Node) {
		n.Labels[protocol.LabelActiveMaintenance] = "passthrough"
		n.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining)
		n.Annotations[protocol.AnnotationReason] = string(protocol.ReasonHostMaintenance)
		n.Annotations[protocol.AnnotationLeftToGKE] = "true"
	})
	if _, out := kubectl(t, false, "", "why", "why-gke"); !strings.Contains(out, "is left to GKE's own maintenance handler, seen handling the node (label cloud.google.com/active-node-maintenance=passthrough)") {
		t.Errorf("why a maintenance left to GKE: %q", out)
	}
	world.NodeT(t, testworld.NodeSpec{Name: "why-cooling", Pool: "why"})
	publish(t, "why-cooling", func(n *corev1.Node) {
		n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(t0.Add(48*time.Hour), true)
		n.Annotations[protocol.AnnotationVoluntaryFailures] = `{"count":2,"reason":"permission_denied","last":"2026-11-23T11:00:00Z","retry-after":"2026-11-23T13:00:00Z"}`
	})
	if _, out := kubectl(t, false, "", "why", "why-cooling"); !strings.Contains(out, "Its last 2 voluntary maintenance(s) failed (permission_denied") || !strings.Contains(out, "does not pick it before 2026-11-23T13:00:00Z (in 1h0m)") {
		t.Errorf("why cooling down: %q", out)
	}
	// An observed node: what its agent decided is on its Lease, said as
	// decided and not done.
	world.NodeT(t, testworld.NodeSpec{Name: "why-observed", Pool: "why"})
	publish(t, "why-observed", func(*corev1.Node) {})
	before, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "why-observed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after := before.DeepCopy()
	after.Annotations[protocol.AnnotationPhase] = string(protocol.PhaseDraining)
	after.Annotations[protocol.AnnotationReason] = string(protocol.ReasonHostMaintenance)
	after.Annotations[protocol.AnnotationStarted] = t0.Format(time.RFC3339)
	after.Annotations[protocol.AnnotationDeadline] = t0.Add(time.Hour).Format(time.RFC3339)
	var shadow protocol.Shadow
	shadow.Record(before, after)
	ans := world.Namespace(t)
	if _, err := world.Client.CoordinationV1().Leases(ans).Create(testworld.Ctx(t, 10*time.Second), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "why-observed",
		Labels: protocol.ObservedNodeLabels, Annotations: map[string]string{protocol.AnnotationShadow: shadow.Encode()}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, out := kubectl(t, false, "", "why", "--agent-namespace", ans, "why-observed"); !strings.HasPrefix(out, "Observe-only: what follows was decided and not done") || !strings.Contains(out, "is in maintenance: Draining for host-maintenance") {
		t.Errorf("why an observed node drains: %q", out)
	}
	if _, out := kubectl(t, false, "", "why", "why-observed"); strings.Contains(out, "Observe-only") || strings.Contains(out, "in maintenance") {
		t.Errorf("why an observed node, its Lease not read: %q", out)
	}
	world.NodeT(t, testworld.NodeSpec{Name: "why-quiet", Pool: "why"})
	publish(t, "why-quiet", func(*corev1.Node) {})
	if _, out := kubectl(t, false, "", "why", "why-quiet"); !strings.Contains(out, "has no maintenance scheduled") {
		t.Errorf("why nothing: %q", out)
	}
	if code, _ := kubectl(t, false, "", "why"); code != exitUsage {
		t.Errorf("why with no node: exit %d, want 2", code)
	}
}

// TestTriggerChecksFirst: trigger's pre-flight check refuses what the
// agent would (exit 3, nothing changed), shows the drain's plan with the
// budget that refuses now, and, accepted, labels the node and follows a
// real agent until the node is terminating.
func TestTriggerChecksFirst(t *testing.T) {
	testworld.Need(t)
	f := vms.ForTest(t, world)
	ctx := testworld.Ctx(t, 3*time.Minute)
	// Refused: no notice, one that cannot be rescheduled, one in maintenance.
	for name, change := range map[string]func(*corev1.Node){
		"tr-none": func(*corev1.Node) {},
		"tr-fixed": func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(t0.Add(time.Hour), false)
		},
		"tr-busy": func(n *corev1.Node) {
			n.Annotations[protocol.AnnotationUpcomingMaintenance] = pendingNotice(t0.Add(time.Hour), true)
			n.Annotations[protocol.AnnotationPhase], n.Annotations[protocol.AnnotationReason] = string(protocol.PhaseDraining), string(protocol.ReasonPreemption)
			n.Annotations[protocol.AnnotationDeadline] = t0.Add(time.Minute).Format(time.RFC3339)
		},
	} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "trig"})
		publish(t, name, change)
		code, out := kubectl(t, false, "", "trigger", name, "--yes")
		n, _ := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if _, set := n.Labels[protocol.LabelPerformMaintenance]; code != exitRefused || !strings.Contains(out, "refused: ") || set {
			t.Errorf("trigger %s: exit %d, label set %t, %q; want refused (3), nothing changed", name, code, set, out)
		}
	}
	// Accepted, with a real agent: a workload under a budget that refuses
	// now, shown first.
	v, err := f.Add(ctx, testworld.NodeSpec{Name: "tr-ok", Pool: "trig"}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v.Emu.SetPerformMaintenanceDelay(time.Second)
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	ns := world.Namespace(t)
	grace := int64(1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: ns, Labels: map[string]string{"app": "server"}},
		Spec: corev1.PodSpec{NodeName: "tr-ok", TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/x:1"}}}}
	if _, err := world.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	world.Budget(t, ns, "server", map[string]string{"app": "server"}, intstr.FromInt32(1), "computed", nil)
	world.WaitNode(t, "tr-ok", "the agent mirrors the notice", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] != ""
	})
	code, out := kubectl(t, true, "", "trigger", "tr-ok", "--dry-run")
	t.Logf("trigger --dry-run:\n%s", out)
	for _, want := range []string{"ok: the agent would accept the trigger", "workload  " + ns + "/server, grace 1s  (refused now by " + ns + "/server", "Dry run: nothing changed."} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("trigger --dry-run: exit %d, output does not say %q:\n%s", code, want, out)
		}
	}
	if code, out := kubectl(t, true, "n\n", "trigger", "tr-ok"); code != exitOK || !strings.Contains(out, "Not started.") {
		t.Errorf("trigger answered n: exit %d, %q", code, out)
	}
	// The budget lets the eviction through once the pod is gone from the
	// count: delete it, so that the drain can finish.
	_ = world.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "server", metav1.DeleteOptions{})
	code, out = kubectl(t, true, "", "trigger", "tr-ok", "--yes", "--timeout", "2m")
	if code != exitOK || !strings.Contains(out, protocol.EventManualStarted) || !strings.Contains(out, "Compute Engine has begun the maintenance of tr-ok") {
		t.Errorf("trigger --yes: exit %d:\n%s", code, out)
	}
	if calls := len(v.Emu.Calls()); calls != 1 {
		t.Errorf("%d performMaintenance calls, want 1", calls)
	}

	// Accepted, then its operation fails: the node was terminating (drained)
	// but the maintenance never begins; trigger says so and exits 3, not 0.
	w, err := f.Add(ctx, testworld.NodeSpec{Name: "tr-opfail", Pool: "trig"}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Emu.SetPerformMaintenanceDelay(time.Second)
	w.Emu.SetOperationFailure("the host is not available for maintenance now")
	w.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
	world.WaitNode(t, "tr-opfail", "the notice mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	code, out = kubectl(t, true, "", "trigger", "tr-opfail", "--yes", "--timeout", "2m")
	if code != exitRefused || !strings.Contains(out, protocol.EventManualNotStarted) || strings.Contains(out, "Compute Engine has begun") {
		t.Errorf("trigger whose operation fails: exit %d, want 3 with %s:\n%s", code, protocol.EventManualNotStarted, out)
	}
}

// TestTriggerSeveralNodes: trigger takes several nodes, or a pool: where
// one node's agent would refuse, none is labelled (exit 3); accepted, each
// node is labelled and followed, its lines prefixed with its name, until
// Compute Engine has begun each node's maintenance, one call each.
func TestTriggerSeveralNodes(t *testing.T) {
	testworld.Need(t)
	f := vms.ForTest(t, world)
	ctx := testworld.Ctx(t, 3*time.Minute)
	var vs []*vms.VM
	for _, name := range []string{"many-a", "many-b"} {
		v, err := f.Add(ctx, testworld.NodeSpec{Name: name, Pool: "many"}, gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		v.Emu.SetPerformMaintenanceDelay(time.Second)
		v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
		world.WaitNode(t, name, "the notice mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
		vs = append(vs, v)
	}
	world.NodeT(t, testworld.NodeSpec{Name: "many-none", Pool: "other"})
	publish(t, "many-none", func(*corev1.Node) {})
	labelled := func() []string {
		var out []string
		for _, name := range []string{"many-a", "many-b", "many-none"} {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil && n.Labels[protocol.LabelPerformMaintenance] != "" {
				out = append(out, name)
			}
		}
		return out
	}
	code, out := kubectl(t, true, "", "trigger", "many-a", "many-none", "--yes")
	if code != exitRefused || !strings.Contains(out, "1 of 2 node(s)' agents would refuse") || len(labelled()) != 0 {
		t.Errorf("trigger of two nodes, one refused: exit %d, labelled %v; want 3, none:\n%s", code, labelled(), out)
	}
	code, out = kubectl(t, true, "", "trigger", "--pool", "many", "--yes", "--timeout", "2m")
	for _, want := range []string{"Labelled many-a", "Labelled many-b", "[many-a] Compute Engine has begun the maintenance of many-a", "[many-b] Compute Engine has begun the maintenance of many-b"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("trigger --pool many: exit %d, the output does not say %q:\n%s", code, want, out)
		}
	}
	for _, v := range vs {
		if calls := len(v.Emu.Calls()); calls != 1 {
			t.Errorf("%s: %d performMaintenance calls, want 1", v.Name, calls)
		}
	}
	if code, out := kubectl(t, true, "", "trigger", "--yes"); code != exitUsage {
		t.Errorf("trigger of no node: exit %d, want 2:\n%s", code, out)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKubectlFlagsChooseTheCluster: kubectl's flags say where to connect,
// as with any kubectl command: a kubeconfig whose current context is a
// cluster that is not there fails, and --context picks the test world's.
func TestKubectlFlagsChooseTheCluster(t *testing.T) {
	testworld.Need(t)
	world.NodeT(t, testworld.NodeSpec{Name: "flags-0", Pool: "flagged"})
	kc, err := clientcmd.LoadFromFile(world.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	good := kc.CurrentContext
	kc.Clusters["gone"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: kc.Contexts[good].AuthInfo}
	kc.CurrentContext = "gone"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		a := &app{flags: newKubeFlags(), now: time.Now, loc: time.UTC, out: &out, errOut: &out, in: strings.NewReader("")}
		return a.run(testworld.Ctx(t, time.Minute), append(args, "status", "--pool", "flagged")), out.String()
	}
	if code, out := run("--kubeconfig", path, "--request-timeout", "5s"); code != exitError {
		t.Errorf("the current context's cluster is not there: exit %d, %q; want 1", code, out)
	}
	if code, out := run("--kubeconfig", path, "--context", good); code != exitOK || !strings.Contains(out, "flags-0") {
		t.Errorf("--context %s: exit %d, %q; want 0 and the node", good, code, out)
	}
}

// TestStatusWatchRedrawsOnChange: status --watch prints the table again
// when a node changes, and ends with exit 0 when interrupted.
func TestStatusWatchRedrawsOnChange(t *testing.T) {
	testworld.Need(t)
	world.NodeT(t, testworld.NodeSpec{Name: "watch-0", Pool: "watched"})
	publish(t, "watch-0", func(n *corev1.Node) { n.Annotations[protocol.AnnotationBusy] = protocol.BusyAccelerators })
	var out syncBuffer
	a := &app{flags: newKubeFlags(), now: time.Now, loc: time.UTC, out: &out, errOut: &out, in: strings.NewReader("")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- a.run(ctx, []string{"--kubeconfig", world.Kubeconfig, "status", "--pool", "watched", "--watch"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("status --watch interrupted: exit %d, want 0", code)
		}
	}()
	waitOutput := func(what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return strings.Contains(out.String(), what), nil
		})
		if err != nil {
			t.Fatalf("the output never said %q:\n%s", what, out.String())
		}
	}
	waitOutput("busy: accelerators")
	publish(t, "watch-0", func(n *corev1.Node) {
		delete(n.Annotations, protocol.AnnotationBusy)
		n.Annotations[protocol.AnnotationIdleSince] = time.Now().Add(-time.Hour).Format(time.RFC3339)
	})
	waitOutput("\n--- ")
	waitOutput("idle 1h")
}

// TestNoPermissionIsSaid: a user who may not list Nodes is told so, and
// the plugin exits 1.
func TestNoPermissionIsSaid(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody", Namespace: ns}}
	if _, err := world.Client.CoreV1().ServiceAccounts(ns).Create(testworld.Ctx(t, 10*time.Second), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(testworld.Ctx(t, 10*time.Second), "nobody", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testworld.WriteKubeconfig(kubeconfig, world.ConfigForToken(tr.Status.Token)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	a := &app{flags: newKubeFlags(), now: time.Now, loc: time.UTC, out: &out, errOut: &out, in: strings.NewReader("")}
	if code := a.run(testworld.Ctx(t, time.Minute), []string{"--kubeconfig", kubeconfig, "status"}); code != exitError || !strings.Contains(out.String(), "no permission to list Nodes") {
		t.Errorf("exit %d, %q; want 1 saying there is no permission", code, out.String())
	}
}

// TestReportFaulty: report-faulty --dry-run says what would happen and
// changes nothing; without it, the node carries the request and the
// description; an unknown behavior is a usage error. status and why show
// a faulty node and where its repair stands.
func TestReportFaulty(t *testing.T) {
	testworld.Need(t)
	for _, name := range []string{"rf-0", "rf-1"} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "rf"})
		publish(t, name, func(*corev1.Node) {})
	}
	before, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rf-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	code, out := kubectl(t, true, "", "report-faulty", "rf-0", "--behavior", "CHIP_ERROR", "--dry-run")
	if code != exitOK || !strings.Contains(out, "approve its repair at once") || !strings.Contains(out, "reportHostAsFaulty (CHIP_ERROR)") ||
		!strings.Contains(out, "Dry run: nothing changed.") {
		t.Errorf("dry run: exit %d, %q", code, out)
	}
	after, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "rf-0", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the dry run changed the node (resourceVersion %s, was %s): %v", after.ResourceVersion, before.ResourceVersion, err)
	}
	if code, out := kubectl(t, true, "", "report-faulty", "rf-0", "--behavior", "XID"); code != exitUsage || !strings.Contains(out, "UNRECOVERABLE_GPU_ERROR") {
		t.Errorf("an unknown behavior: exit %d, %q; want a usage error naming the behaviors", code, out)
	}
	code, out = kubectl(t, true, "", "report-faulty", "rf-0", "--behavior", "CHIP_ERROR", "--description", "GPU 3 stopped answering", "--yes")
	if code != exitOK {
		t.Fatalf("report: exit %d, %q", code, out)
	}
	world.WaitNode(t, "rf-0", "asking for its repair", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelReportFaulty] == "CHIP_ERROR" && n.Annotations[protocol.AnnotationReportFaultyDescription] == "GPU 3 stopped answering"
	})
	code, out = kubectl(t, true, "", "status", "--pool", "rf")
	if code != exitOK || !strings.Contains(out, "FAULTY NODE") || !strings.Contains(out, "approved at the next pass") || !strings.Contains(out, "1 of 1") {
		t.Errorf("status: exit %d, %q; want the faulty line", code, out)
	}
	// The aggregator (not running here) would approve it; as approved:
	publish(t, "rf-0", func(n *corev1.Node) {
		protocol.WriteRepairApproval(n, protocol.RepairApproval{Behavior: "CHIP_ERROR", Source: protocol.FaultSourcePerson, Signal: "a person said so",
			Approved: time.Now(), DrainTimeout: protocol.Duration(30 * time.Minute)})
	})
	code, out = kubectl(t, true, "", "why", "rf-0")
	if code != exitOK || !strings.Contains(out, "its repair is under way (1 of 1") {
		t.Errorf("why: exit %d, %q; want the repair under way", code, out)
	}
	// A pool at once: each node shown, asked for once, each labelled.
	code, out = kubectl(t, true, "y\n", "report-faulty", "--pool", "rf", "--behavior", "PERFORMANCE")
	if code != exitOK || !strings.Contains(out, "Report 2 nodes (rf-0, rf-1) faulty (PERFORMANCE)? [y/N]") {
		t.Errorf("report-faulty --pool rf: exit %d, %q", code, out)
	}
	for _, name := range []string{"rf-0", "rf-1"} {
		world.WaitNode(t, name, "asking for its repair as PERFORMANCE", func(n *corev1.Node) bool {
			_, described := n.Annotations[protocol.AnnotationReportFaultyDescription]
			return n.Labels[protocol.LabelReportFaulty] == "PERFORMANCE" && !described
		})
	}
}

// TestCompletesNodeNames: shell completion offers the cluster's node
// names for a node argument, less those already named.
func TestCompletesNodeNames(t *testing.T) {
	testworld.Need(t)
	for _, name := range []string{"complete-a1", "complete-a2", "complete-b1"} {
		world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "complete"})
	}
	code, out := kubectl(t, false, "", "__complete", "trigger", "complete-a1", "complete-a")
	if code != exitOK || !strings.Contains(out, "complete-a2\n") || strings.Contains(out, "complete-a1\n") || strings.Contains(out, "complete-b1") {
		t.Errorf("completing complete-a after complete-a1: %d\n%s", code, out)
	}
}
