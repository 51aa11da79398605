package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

const (
	roleLabel     = "demo.maintenance-handler.io/role"
	opportunistic = "node-idle-time=10s,min-nodes=3,window=2419200s"
	pool          = "a3-highgpu-8g"
	slicePool     = "v5p-slice"
	sliceMachine  = "ct5p-hightpu-4t"
	workloads     = "ml"
	// policyConfigMap is the policy ConfigMap's name, in kube-system.
	policyConfigMap = "maintenance-handler"
)

type demo struct {
	world           *testworld.World
	fleet           *vms.Fleet
	aggregatorBin   string
	aggregatorAddrs []string
	start           time.Time
	vms             []*vms.VM
	slice           []*vms.VM // the hosts of the multi-host TPU slice
	grace           int       // the trainer's checkpoint-on-SIGTERM budget, seconds
	// The real node, where the machine allows one (setUpRealNode).
	real    *testworld.RealNode
	realVM  *vms.VM
	realPod *corev1.Pod
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("%7.1fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// setUp makes five GPU nodes (the fourth one Spot, the fifth a spare the
// trainer does not use), their metadata servers and agents, two
// aggregators, the training job and some system pods.
func (d *demo) setUp(ctx context.Context) error {
	c := d.world.Client
	for i := range 5 {
		role := "training"
		if i == 4 {
			role = "spare"
		}
		spec := testworld.NodeSpec{Name: fmt.Sprintf("gke-%s-%d", pool, i), Pool: pool, Spot: i == 3, Project: "demo-project", Zone: "us-central1-a",
			Labels: map[string]string{roleLabel: role}}
		v, err := d.fleet.Add(ctx, spec, gceemu.Config{Preemptible: spec.Spot})
		if err != nil {
			return err
		}
		// Compute Engine takes a moment to start a maintenance it accepted.
		v.Emu.SetPerformMaintenanceDelay(3 * time.Second)
		d.vms = append(d.vms, v)
		// The pool's opportunistic maintenance setting, as GKE users write it.
		if err := d.annotate(ctx, v, protocol.AnnotationOpportunisticConfig, opportunistic); err != nil {
			return err
		}
	}
	// A multi-host TPU slice: four hosts of 4 chips, topology 2x2x4 (16
	// chips), one job across them.
	for i := range 4 {
		spec := testworld.NodeSpec{Name: fmt.Sprintf("gke-%s-%d", slicePool, i), Pool: slicePool, TPU: true, Project: "demo-project", Zone: "us-central1-a",
			Labels: map[string]string{protocol.LabelTPUTopology: "2x2x4"}}
		v, err := d.fleet.Add(ctx, spec, gceemu.Config{NoMaintenanceEvent: true, MachineType: sliceMachine}) // TPU VMs do not serve maintenance-event
		if err != nil {
			return err
		}
		// The agents make their own Compute calls here, so none asks the
		// aggregator to read its VM: the demo writes what that read says,
		// which proves the host a member of its slice.
		if err := d.annotate(ctx, v, protocol.AnnotationVMFacts, protocol.Encode(protocol.VMFacts{ID: "demo-read", MachineType: sliceMachine, Status: "RUNNING", NodePool: slicePool})); err != nil {
			return err
		}
		d.slice = append(d.slice, v)
	}
	if err := d.createPolicy(ctx); err != nil {
		return err
	}
	for i := range 2 {
		if err := d.startAggregator(ctx, fmt.Sprintf("aggregator-%d", i)); err != nil {
			return err
		}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloads}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(workloads).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	labels := map[string]string{"app": "trainer"}
	replicas := int32(4)
	g := int64(d.grace)
	trainer := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				// kwok stops each pod after its grace: a checkpoint that takes it all.
				// It asks for time to checkpoint when maintenance begins.
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{testworld.PodDeleteDelayAnnotation: fmt.Sprintf("%ds", d.grace),
					protocol.PodAnnotationCheckpointLead: checkpointLead}},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{roleLabel: "training"},
					TerminationGracePeriodSeconds: &g,
					Containers: []corev1.Container{{Name: "train", Image: "registry.invalid/trainer:1", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{testworld.ResourceGPU: resource.MustParse("8")},
						Limits:   corev1.ResourceList{testworld.ResourceGPU: resource.MustParse("8")},
					}}},
				},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(workloads).Create(ctx, trainer, metav1.CreateOptions{}); err != nil {
		return err
	}
	three := intstr.FromInt32(3)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &three, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := c.PolicyV1().PodDisruptionBudgets(workloads).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The slice's job: one pod per host.
	for i, v := range d.slice {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("slice-job-%d", i), Namespace: workloads, Labels: map[string]string{"app": "slice-job"}},
			Spec: corev1.PodSpec{NodeName: v.Name, TerminationGracePeriodSeconds: &g,
				Containers: []corev1.Container{{Name: "jax", Image: "registry.invalid/jax-trainer:1", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")},
					Limits:   corev1.ResourceList{protocol.ResourceTPU: resource.MustParse("4")},
				}}}},
		}
		if _, err := c.CoreV1().Pods(workloads).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// A system pod on each node, stopped after the workloads.
	one := int64(1)
	for _, v := range d.vms {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-metrics-" + v.Name, Namespace: metav1.NamespaceSystem},
			Spec: corev1.PodSpec{NodeName: v.Name, TerminationGracePeriodSeconds: &one,
				Containers: []corev1.Container{{Name: "exporter", Image: "registry.invalid/dcgm-exporter:1"}}},
		}
		if _, err := c.CoreV1().Pods(metav1.NamespaceSystem).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		dep, err := c.AppsV1().Deployments(workloads).Get(ctx, "trainer", metav1.GetOptions{})
		return err == nil && dep.Status.ReadyReplicas == replicas, nil
	})
}

// reboot plays the VM stopping and coming back once v is terminating
// (after Compute Engine starts the maintenance, where the agent asked for
// it), and waits until the node is back in service.
func (d *demo) reboot(ctx context.Context, v *vms.VM, asked bool) error {
	if asked {
		if err := d.waitEmulatorStarted(ctx, v); err != nil {
			return err
		}
	} else {
		// The VM stops at its deadline, not the moment the node is ready:
		// a pause, so that the agent's last Events are out before it dies.
		time.Sleep(2 * time.Second)
	}
	d.say("%s: the VM stops and boots again", v.Name)
	if err := d.fleet.Reboot(ctx, v); err != nil {
		return err
	}
	if err := d.waitNode(ctx, v, time.Minute, backInService); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	return nil
}

func (d *demo) waitNode(ctx context.Context, v *vms.VM, timeout time.Duration, cond func(*corev1.Node) bool) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := d.world.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
		return err == nil && cond(n), nil
	})
}

// annotate sets an annotation on v's Node.
func (d *demo) annotate(ctx context.Context, v *vms.VM, key, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := d.world.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[key] = value
		_, err = d.world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// startAggregator starts one aggregator replica.
func (d *demo) startAggregator(ctx context.Context, id string) error {
	addr, err := testworld.FreeAddr()
	if err != nil {
		return err
	}
	kubeconfig, err := d.world.AggregatorKubeconfig(ctx, metav1.NamespaceSystem)
	if err != nil {
		return err
	}
	_, err = d.world.StartProcess(id, d.aggregatorBin, "--kubeconfig", kubeconfig, "--namespace", metav1.NamespaceSystem,
		"--identity", id, "--config-map", policyConfigMap, "--interval", "2s", "--listen-address", addr, "--compute-caller", "node") // the agents make their own calls
	if err == nil {
		d.aggregatorAddrs = append(d.aggregatorAddrs, addr)
	}
	return err
}

// label sets the perform-maintenance label, as kubectl label would.
func (d *demo) label(ctx context.Context, v *vms.VM, value string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := d.world.Client.CoreV1().Nodes().Get(ctx, v.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Labels[protocol.LabelPerformMaintenance] = value
		_, err = d.world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// waitEmulatorStarted waits until Compute Engine starts the maintenance it
// accepted (maintenance-event TERMINATE_ON_HOST_MAINTENANCE).
func (d *demo) waitEmulatorStarted(ctx context.Context, v *vms.VM) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return v.Emu.MaintenanceEvent() == gceemu.EventTerminate, nil
	})
}

func active(value string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool { return n.Labels[protocol.LabelActiveMaintenance] == value }
}

func backInService(n *corev1.Node) bool {
	return !protocol.HasTaint(n) && !n.Spec.Unschedulable && n.Labels[protocol.LabelActiveMaintenance] == ""
}

func (d *demo) scenario(ctx context.Context) error {
	window := time.Now().Add(7 * 24 * time.Hour).Truncate(time.Hour)
	d.say("== 1. Compute Engine schedules host maintenance on every node for %s", window.UTC().Format(time.RFC3339))
	for _, v := range d.vms {
		v.Emu.ScheduleNotice(gceemu.ScheduledNotice(window, 4*time.Hour))
	}
	for _, v := range d.vms {
		if err := d.waitNode(ctx, v, time.Minute, func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" }); err != nil {
			return err
		}
	}
	if err := d.showNotice(ctx, d.vms[1]); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)

	spare := d.vms[4]
	d.say("== 2. The aggregator picks the idle spare %s for its maintenance now (%s);", spare.Name, opportunistic)
	d.say("   the busy nodes are not picked, and each says why (kubectl describe node)")
	if err := d.waitNode(ctx, spare, 2*time.Minute, active(protocol.ValueTerminating)); err != nil {
		return err
	}
	if err := d.reboot(ctx, spare, true); err != nil {
		return err
	}

	picked := d.vms[0]
	d.say("== 3. A person takes the maintenance of %s now, between training runs", picked.Name)
	d.say("   $ kubectl label nodes %s %s=yes   (not an accepted value: rejected, nothing changes)", picked.Name, protocol.LabelPerformMaintenance)
	if err := d.label(ctx, picked, "yes"); err != nil {
		return err
	}
	if err := d.waitNode(ctx, picked, time.Minute, func(n *corev1.Node) bool { _, set := n.Labels[protocol.LabelPerformMaintenance]; return !set }); err != nil {
		return err
	}
	time.Sleep(time.Second)
	d.say("   $ kubectl label nodes %s %s=true", picked.Name, protocol.LabelPerformMaintenance)
	d.say("   the node is drained first (the trainer gets its %d s), then the agent calls instances.performMaintenance", d.grace)
	if err := d.label(ctx, picked, protocol.TriggerValue); err != nil {
		return err
	}
	if err := d.waitNode(ctx, picked, 5*time.Minute, active(protocol.ValueTerminating)); err != nil {
		return err
	}
	calls := picked.Emu.Calls()
	for _, c := range calls {
		d.say("   Compute Engine received: POST projects/%s/zones/%s/instances/%s/performMaintenance?requestId=%s -> %d",
			c.Project, c.Zone, c.Instance, c.RequestID, c.Status)
	}
	if err := d.reboot(ctx, picked, true); err != nil {
		return err
	}

	busy := d.vms[1]
	d.say("== 4. Compute Engine starts host maintenance on %s (TERMINATE_ON_HOST_MAINTENANCE, 60 min before the stop)", busy.Name)
	d.say("   the trainer there is told it starts, checkpoints in its %s lead, then gets SIGTERM with its full %d s grace; the system pod goes after it", checkpointLead, d.grace)
	stopLoop, err := d.checkpointLoop(ctx, busy)
	if err != nil {
		return err
	}
	busy.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	err = d.waitNode(ctx, busy, 5*time.Minute, active(protocol.ValueTerminating))
	stopLoop()
	if err != nil {
		return err
	}
	if err := d.reboot(ctx, busy, false); err != nil {
		return err
	}

	spot := d.vms[3]
	d.say("== 5. Compute Engine preempts the Spot node %s (preempted=TRUE, 30 s before the stop)", spot.Name)
	if d.grace > 30 {
		d.say("   the trainer's %d s grace is cut to what is left of the 30 s", d.grace)
	} else {
		d.say("   the trainer's %d s grace fits in the 30 s", d.grace)
	}
	spot.Emu.SetPreempted(true)
	if err := d.waitNode(ctx, spot, 2*time.Minute, active(protocol.ValueTerminating)); err != nil {
		return err
	}
	if err := d.reboot(ctx, spot, false); err != nil {
		return err
	}
	if err := d.sliceScenario(ctx); err != nil {
		return err
	}
	if err := d.faultScenario(ctx); err != nil {
		return err
	}
	return d.realScenario(ctx)
}

// sliceScenario: one host of the multi-host TPU slice is preempted; the
// slice is drained as one and comes back as one.
func (d *demo) sliceScenario(ctx context.Context) error {
	cause := d.slice[1]
	d.say("== 6. Compute Engine preempts %s, one host of the multi-host TPU slice %s (4 hosts, one job):", cause.Name, slicePool)
	d.say("   the job cannot run on three hosts: the aggregator asks every other host to drain with it, by its deadline")
	cause.Emu.SetPreempted(true)
	for _, v := range d.slice {
		if err := d.waitNode(ctx, v, 2*time.Minute, active(protocol.ValueTerminating)); err != nil {
			return err
		}
	}
	if err := d.reboot(ctx, cause, false); err != nil {
		return err
	}
	for _, v := range d.slice {
		if err := d.waitNode(ctx, v, 2*time.Minute, backInService); err != nil {
			return err
		}
	}
	d.say("   %s is back: every host of the slice is back in service", cause.Name)
	return nil
}

// timeline prints what a user would see change: node labels, taint and
// cordon; pods starting, terminating and gone; the agents' Events.
func (d *demo) timeline(ctx context.Context) {
	c := d.world.Client
	nodes, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	pods, err := c.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	events, err := c.CoreV1().Events("").Watch(ctx, metav1.ListOptions{FieldSelector: "source=" + protocol.EventSourceAgent})
	if err != nil {
		return
	}
	decisions, err := c.CoreV1().Events("").Watch(ctx, metav1.ListOptions{FieldSelector: "source=" + protocol.EventSourceAggregator})
	if err != nil {
		return
	}
	seenNode := map[string]string{}
	seenPod := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-nodes.ResultChan():
			if !ok {
				return
			}
			if n, ok := ev.Object.(*corev1.Node); ok {
				if s := nodeSummary(n); s != seenNode[n.Name] {
					seenNode[n.Name] = s
					d.say("node %s: %s", n.Name, s)
				}
			}
		case ev, ok := <-pods.ResultChan():
			if !ok {
				return
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (p.Namespace != workloads && p.Namespace != metav1.NamespaceSystem) {
				continue
			}
			key := p.Namespace + "/" + p.Name
			s := podSummary(p, ev.Type)
			if s != "" && s != seenPod[key] {
				seenPod[key] = s
				d.say("pod %s: %s", key, s)
			}
		case ev, ok := <-decisions.ResultChan():
			if !ok {
				return
			}
			if e, ok := ev.Object.(*corev1.Event); ok && ev.Type == watch.Added {
				d.say("event %s %s (aggregator): %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		case ev, ok := <-events.ResultChan():
			if !ok {
				return
			}
			if e, ok := ev.Object.(*corev1.Event); ok && ev.Type == watch.Added {
				d.say("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
}

func nodeSummary(n *corev1.Node) string {
	var parts []string
	if v := n.Labels[protocol.LabelScheduledMaintenanceTime]; v != "" {
		parts = append(parts, "scheduled-maintenance-time="+v)
	}
	if v, ok := n.Labels[protocol.LabelPerformMaintenance]; ok {
		parts = append(parts, "perform-maintenance="+v)
	}
	if v := n.Labels[protocol.LabelActiveMaintenance]; v != "" {
		parts = append(parts, "active-node-maintenance="+v)
	}
	if protocol.HasTaint(n) {
		parts = append(parts, "tainted "+protocol.TaintImpendingTermination+":NoSchedule")
	}
	if protocol.HasTaintKey(n, protocol.TaintFaulty) {
		parts = append(parts, "tainted "+protocol.TaintFaulty+":NoSchedule")
	}
	if n.Spec.Unschedulable {
		parts = append(parts, "cordoned")
	}
	if ask, ok := protocol.ReadSliceAsk(n); ok {
		parts = append(parts, fmt.Sprintf("slice %s down with %s (%s)", ask.Slice, ask.Cause, protocol.TaintSliceDown))
	}
	if len(parts) == 0 {
		return "in service"
	}
	return strings.Join(parts, ", ")
}

func podSummary(p *corev1.Pod, t watch.EventType) string {
	switch {
	case t == watch.Deleted:
		return "gone"
	case p.DeletionTimestamp != nil:
		g := int64(0)
		if p.DeletionGracePeriodSeconds != nil {
			g = *p.DeletionGracePeriodSeconds
		}
		return fmt.Sprintf("SIGTERM, %d s to stop (on %s)", g, p.Spec.NodeName)
	case p.Status.Phase == corev1.PodRunning:
		return "running on " + p.Spec.NodeName
	case p.Spec.NodeName == "":
		return "pending (no node)"
	}
	return ""
}

// summary prints what each agent's /metrics counted, as Prometheus would
// scrape it: the interruptions by type and reason.
func (d *demo) summary(ctx context.Context) error {
	d.say("== What the agents counted (maintenance_handler_agent_interruptions_total, from each /metrics)")
	for _, v := range append(append([]*vms.VM{}, d.vms...), d.slice...) {
		counts, err := interruptions(ctx, "http://"+v.MetricsAddr+"/metrics", "maintenance_handler_agent_interruptions_total")
		if err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
		if len(counts) == 0 {
			counts = []string{"none"}
		}
		d.say("   %s: %s", v.Name, strings.Join(counts, ", "))
	}
	d.say("== What the aggregator counted (maintenance_handler_aggregator_slice_interruptions_total, the leader's /metrics)")
	var slices []string
	for _, addr := range d.aggregatorAddrs {
		counts, err := interruptions(ctx, "http://"+addr+"/metrics", "maintenance_handler_aggregator_slice_interruptions_total")
		if err != nil {
			return fmt.Errorf("aggregator %s: %w", addr, err)
		}
		slices = append(slices, counts...)
	}
	for _, c := range slices {
		d.say("   %s", c)
	}
	return d.pluginStatus(ctx)
}

// pluginStatus prints what `kubectl gce-maintenance status` shows now.
func (d *demo) pluginStatus(ctx context.Context) error {
	c, err := kube.New(d.world.Config)
	if err != nil {
		return err
	}
	in, err := plugin.Read(ctx, c, time.Now(), plugin.ReadOptions{PoolLabel: protocol.LabelNodePool}, nil)
	if err != nil {
		return err
	}
	d.say("== kubectl gce-maintenance status (the plugin, bin/kubectl-gce_maintenance)")
	var b strings.Builder
	if err := plugin.BuildStatus(in).WriteTable(&b, in.Now, time.Local, false); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		d.say("   %s", line)
	}
	return nil
}

// interruptions reads the non-zero interruption counters of family at
// url, sorted ("slice NAME: " first where the series names a slice).
func interruptions(ctx context.Context, url, family string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range families[family].GetMetric() {
		if m.GetCounter().GetValue() == 0 {
			continue
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		line := fmt.Sprintf("%s/%s %g", labels["interruption_type"], labels["interruption_reason"], m.GetCounter().GetValue())
		if slice := labels["slice"]; slice != "" {
			line = "slice " + slice + ": " + line
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out, nil
}
