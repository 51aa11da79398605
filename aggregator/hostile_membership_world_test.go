package aggregator_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// v5pMachine is the machine type of a GKE tpu-v5p-slice node: 4 chips.
const v5pMachine = "ct5p-hightpu-4t"

// proveVMs writes on each of names, as the aggregator's relay writes it,
// the answer to a read of its VM (facts, with an ID of the test's, and,
// where facts name none, the Node's pool as its VM's GKE node pool): for
// tests whose agents make their own Compute calls (--compute-caller node)
// and so never ask the aggregator to read their VM. The tests below have
// the aggregator read the VMs through Compute Engine.
func proveVMs(t testing.TB, ctx context.Context, facts protocol.VMFacts, names ...string) {
	t.Helper()
	facts.ID = "test-read"
	for _, name := range names {
		f := facts
		if f.NodePool == "" {
			n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f.NodePool = n.Labels[protocol.LabelNodePool]
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, protocol.AnnotationVMFacts, protocol.Encode(f))
		if _, err := world.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// readingAggregator starts an aggregator process, named id, that reads the
// VMs through project's Compute API with its own identity, as installed
// by default, serving metrics at addr.
func (p *procs) readingAggregator(id, addr string, project *gceemu.Project, args ...string) {
	p.t.Helper()
	args = append([]string{"--kubeconfig", world.AggregatorKubeconfigT(p.t, p.ns), "--namespace", p.ns, "--identity", id, "--interval", "1s",
		"--listen-address", addr, "--log-level", "warn", "--compute-endpoint", project.ComputeEndpoint()}, args...)
	agg, err := world.StartProcessEnv("aggregator-"+id, []string{"GCE_METADATA_HOST=" + project.Identity.Host()}, filepath.Join(p.bins, "aggregator"), args...)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = agg.Kill() })
}

// relayProcs is newProcs with agents that ask the aggregator for every
// Compute call and read (the default install), in a project of their own.
func relayProcs(t *testing.T, agentArgs ...string) (*procs, *gceemu.Project) {
	t.Helper()
	p := newProcs(t, agentArgs...)
	project, err := gceemu.NewProject()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(project.Close)
	p.f.Project = project
	return p, project
}

// passes waits until the aggregator at addr has finished n more passes.
func passes(t *testing.T, ctx context.Context, addr string, n float64) {
	t.Helper()
	const series = "maintenance_handler_aggregator_pass_duration_seconds_count"
	target := metricSumQuiet(addr, series) + n
	waitMetric(t, ctx, addr, series, target)
}

// labelledIn registers a GPU node (no VM of the project's) with labels
// its kubelet chose, as `--node-labels` lets any kubelet, and returns its
// three identities.
func labelledIn(t *testing.T, name, pool string, labels map[string]string) *testworld.Hostile {
	t.Helper()
	world.NodeT(t, testworld.NodeSpec{Name: name, Pool: pool, Labels: labels})
	t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return world.HostileNode(t, name)
}

// writeState writes st on name's Node with client (its agent's token).
func writeState(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, st protocol.AgentState) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		protocol.WriteAgentState(n, st)
		_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the agent token's write of its own state: %v", err)
	}
}

// movedNode names the Node o and says whether something moved it: a slice
// ask, a maintenance of its agent's, a taint of the product's, a cordon.
func movedNode(o any) (string, bool) {
	n := o.(*corev1.Node)
	_, asked := protocol.ReadSliceAsk(n)
	return n.Name, asked || protocol.ReadAgentState(n).Active() || protocol.HasTaint(n) || protocol.HasTaintKey(n, protocol.TaintSliceDown) || n.Spec.Unschedulable
}

// nodesMoved records, through a watch, when each Node was first moved
// (movedNode) from now until t ends.
func nodesMoved(t *testing.T, ctx context.Context) *seen {
	t.Helper()
	return firstSeen(t, ctx, informers.NewSharedInformerFactory(world.Client, 0).Core().V1().Nodes().Informer(), movedNode)
}

// untouched fails t for every one of hosts that carries a slice ask, a
// taint of the product's, a cordon or a maintenance of its agent's.
func untouched(t *testing.T, ctx context.Context, hosts ...string) {
	t.Helper()
	for _, h := range hosts {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, moved := movedNode(n); moved {
			_, asked := protocol.ReadSliceAsk(n)
			st := protocol.ReadAgentState(n)
			t.Errorf("%s was moved: slice ask %t, maintenance %s %s, tainted %t, cordoned %t", h, asked, st.Phase, st.Reason, protocol.HasTaint(n), n.Spec.Unschedulable)
		}
	}
}

// readSlice starts a four-host TPU slice in the pool v5p (real agents
// that ask the aggregator for every Compute call and read, TPU VMs GKE
// labelled with their pool, a pod on each host) and an aggregator, named
// id, that reads the VMs through Compute Engine, and waits until it has
// read each host's: a TPU VM of the pool v5p. It returns the slice, the
// project and the aggregator's metrics address.
func readSlice(t *testing.T, ctx context.Context, id string) (*slice, *gceemu.Project, string) {
	t.Helper()
	p, project := relayProcs(t, "--eviction-retry-interval", "1s")
	s := newSliceOf(t, ctx, p, "v5p", 4)
	addr := testworld.FreeAddrT(t)
	p.readingAggregator(id, addr, project)
	world.WaitNodes(t, s.hosts, "read by the aggregator: TPU VMs of the pool v5p", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.MachineType == v5pMachine && f.NodePool == "v5p"
	})
	return s, project, addr
}

// TestLabelledInNodeMovesNoSliceHost plays issue 73's attack on a slice:
// a four-host TPU slice (real agents, TPU VMs the aggregator reads
// through Compute Engine, a pod on each host) and a GPU node whose kubelet
// registered it into the slice's pool with its TPU topology, then patched
// four TPU chips into its capacity, and whose agent token writes a
// preemption under way that started a year ahead. Nothing moves: after
// the aggregator's passes, no real host carries an ask or a taint, and its
// pod runs. Then a real host is preempted: the others drain with it, by
// its deadline, and none was tainted before it.
func TestLabelledInNodeMovesNoSliceHost(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s, _, addr := readSlice(t, ctx, "agg-members")

	h := labelledIn(t, "gpu-labelled-in", "v5p", map[string]string{protocol.LabelTPUTopology: "2x2x4", protocol.LabelTPUAccelerator: "tpu-v5p-slice"})
	chips := fmt.Appendf(nil, `{"status":{"capacity":{%q:"4"},"allocatable":{%q:"4"}}}`, protocol.ResourceTPU, protocol.ResourceTPU)
	if _, err := h.Kubelet.CoreV1().Nodes().PatchStatus(ctx, h.Node, chips); err != nil {
		t.Fatalf("the kubelet's patch of its capacity: %v", err)
	}
	// Its start a year ahead, its deadline before any real host's: a host
	// that believed it would drain by it.
	ahead := time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	writeState(t, ctx, h.Agent, h.Node, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: ahead, Deadline: time.Now().Add(20 * time.Second).UTC()})

	// Every real host's agent steps on the forged state (its slice watch
	// wakes it); the aggregator decides twice with it.
	passes(t, ctx, addr, 2)
	untouched(t, ctx, s.hosts...)
	s.mu.Lock()
	if len(s.tainted) > 0 || len(s.stopped) > 0 {
		t.Errorf("hosts tainted %v, pods stopped %v, for a node labelled into the slice", s.tainted, s.stopped)
	}
	s.mu.Unlock()

	// The real slice still goes down as one.
	preempted := time.Now()
	deadline := s.preempt(t, ctx, "v5p-1")
	s.drainedWith(t, ctx, deadline, []string{"v5p-0", "v5p-2", "v5p-3"}, []string{"job-0", "job-1", "job-2", "job-3"})
	world.WaitEvent(t, "v5p-0", protocol.EventSliceDrain, "Host v5p-1 of the multi-host slice v5p stops (preemption)")
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, at := range s.tainted {
		if at.Before(preempted) {
			t.Errorf("%s tainted at %s, before the real host's preemption at %s", h, at.Format(time.RFC3339Nano), preempted.Format(time.RFC3339Nano))
		}
	}
}

// TestOtherPoolTPUNodeMovesNoSliceHost plays issue 73's attack on a slice
// with a TPU VM of the slice's own generation (ct5p-hightpu-4t), which GKE
// made for another pool (its goog-k8s-node-pool-name resource label says
// v5p-b): its kubelet registered its Node into the four-host slice's pool
// v5p with the slice's topology and its own four chips, its agent token
// asked the aggregator to read its VM, then wrote a preemption under way.
// Its VM is what a host's is but for its pool, and its preemption moves
// no host: no host carries an ask or a taint, and its pod runs. The
// aggregator says why on the node (Warning GroupMembershipUnproven) and
// counts its maintenance once.
func TestOtherPoolTPUNodeMovesNoSliceHost(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	s, project, addr := readSlice(t, ctx, "agg-pools")

	const name, read = "v5p-b-0", "hostile-read"
	emu := gceemu.StartT(t, gceemu.Config{Name: name, MachineType: v5pMachine, NoMaintenanceEvent: true,
		Labels: map[string]string{"goog-k8s-cluster-name": vms.ClusterName, protocol.VMResourceLabelNodePool: "v5p-b"}})
	emu.DenyOwnToken(true)
	project.Add(emu)
	world.NodeT(t, testworld.NodeSpec{Name: name, Pool: "v5p", TPU: true, Labels: map[string]string{protocol.LabelTPUTopology: "2x2x4"}})
	t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	h := world.HostileNode(t, name)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := h.Agent.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Annotations[protocol.AnnotationVMRead] = read
		_, err = h.Agent.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the agent token's ask to read its VM: %v", err)
	}
	world.WaitNodes(t, []string{name}, "read by the aggregator: a TPU VM of the pool v5p-b", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.ID == read && f.MachineType == v5pMachine && f.NodePool == "v5p-b"
	})
	now := time.Now().UTC().Truncate(time.Second)
	writeState(t, ctx, h.Agent, name, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonPreemption, Started: now, Deadline: now.Add(20 * time.Second)})

	passes(t, ctx, addr, 2)
	untouched(t, ctx, s.hosts...)
	// The aggregator says why on the liar, and counts its maintenance
	// once, however many passes see it.
	world.WaitEvent(t, name, protocol.EventGroupUnproven, "moves no other member", `its VM is in the node pool "v5p-b", not in "v5p"`)
	passes(t, ctx, addr, 2)
	const unproven = "maintenance_handler_aggregator_unproven_group_maintenances_total"
	if got := metricSumQuiet(addr, unproven); got != 1 {
		t.Errorf("%s = %v; want 1", unproven, got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, host := range s.hosts {
		if at, ok := s.tainted[host]; ok {
			t.Errorf("%s tainted at %s, for a TPU VM of another pool labelled into the slice", host, at.Format(time.RFC3339Nano))
		}
	}
	if len(s.stopped) > 0 {
		t.Errorf("pods stopped %v, for a TPU VM of another pool labelled into the slice", slices.Sorted(maps.Keys(s.stopped)))
	}
}

// TestLabelledInNodeJoinsNoReservationGroup: two GPU nodes of one
// reservation sub-block (real agents, --reservation-groups subblock, VMs
// the aggregator reads through Compute Engine) and a GPU node in no
// reservation whose kubelet registered it with the sub-block's
// gce-topology-* labels, and whose agent token writes a manual maintenance
// under way. Nobody drains with it: after the aggregator's passes, the
// members carry no ask, no taint, and their pods run; no member is told
// of the group's state but the real ones. A person's request on a real
// member then drains the other, and neither began to drain before.
func TestLabelledInNodeJoinsNoReservationGroup(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	sb := gceemu.SubBlock{Reservation: "hostile-res", Block: "block-4", SubBlock: "sub-2"}
	p, project, hosts, emus := runningSubBlock(t, ctx, sb, "rg", "a4x")
	draining := nodesMoved(t, ctx)
	deleted := firstSeen(t, ctx, podsOf(p.ns), podDeleted)
	addr := readSubBlock(t, p, project, emus, sb, hosts, "agg-groups")

	h := labelledIn(t, "rg-gpu", "a4x", map[string]string{protocol.LabelTopologyBlock: sb.Block, protocol.LabelTopologySubblock: sb.SubBlock})
	now := time.Now().UTC().Truncate(time.Second)
	writeState(t, ctx, h.Agent, h.Node, protocol.AgentState{Phase: protocol.PhaseDraining, Reason: protocol.ReasonManual, Started: now, Deadline: now.Add(time.Hour), RequestID: "forged-1"})

	passes(t, ctx, addr, 2)
	untouched(t, ctx, hosts...)
	world.WaitNodes(t, hosts, "told of their sub-block's state", func(n *corev1.Node) bool {
		_, ok := protocol.ReadReservationGroup(n)
		return ok
	})
	if n, err := world.Client.CoreV1().Nodes().Get(ctx, h.Node, metav1.GetOptions{}); err != nil || n.Annotations[protocol.AnnotationReservationGroup] != "" {
		t.Errorf("the node labelled in is told of the sub-block's state (%v): %q", err, n.Annotations[protocol.AnnotationReservationGroup])
	}

	asked := time.Now()
	setLabel(t, ctx, "rg-0", protocol.LabelPerformMaintenance, protocol.TriggerValue)
	world.WaitNodes(t, []string{"rg-1"}, "drained with its group, for the person's request", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonSlice && protocol.HasTaint(n)
	})
	world.WaitEvent(t, "rg-1", protocol.EventSliceDrain, "Host rg-0")
	for _, m := range hosts {
		if at := draining.at(m); !at.IsZero() && at.Before(asked) {
			t.Errorf("%s began to drain at %s, before the person asked (%s)", m, at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
		}
	}
	for _, pod := range []string{"rank-0", "rank-1"} {
		if at := deleted.at(pod); !at.IsZero() && at.Before(asked) {
			t.Errorf("%s deleted at %s, before the person asked (%s)", pod, at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
		}
	}
}

// runningSubBlock starts the agents of a two-VM reservation sub-block sb
// (--reservation-groups subblock; Nodes named after prefix, in pool) and
// waits until each runs its pod rank-i.
func runningSubBlock(t *testing.T, ctx context.Context, sb gceemu.SubBlock, prefix, pool string) (*procs, *gceemu.Project, []string, []*gceemu.Server) {
	t.Helper()
	p, project := relayProcs(t, "--eviction-retry-interval", "1s", "--reservation-groups", "subblock")
	hosts, emus := subBlockMembers(t, ctx, p, sb, prefix, pool, 2)
	for i := range hosts {
		world.WaitPod(t, p.ns, fmt.Sprintf("rank-%d", i), "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	return p, project, hosts, emus
}

// readSubBlock starts an aggregator, named id, that reads sb's VMs through
// Compute Engine, and waits until its read proves each host a member; it
// returns the aggregator's metrics address.
func readSubBlock(t *testing.T, p *procs, project *gceemu.Project, emus []*gceemu.Server, sb gceemu.SubBlock, hosts []string, id string) string {
	t.Helper()
	addr := testworld.FreeAddrT(t)
	reservation := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation)
	p.readingAggregator(id, addr, project, "--reservation-groups", "subblock", "--reservations", reservation, "--reservation-interval", "1s")
	world.WaitNodes(t, hosts, "read by the aggregator: in the sub-block", func(n *corev1.Node) bool {
		f, ok := protocol.ReadVMFacts(n)
		return ok && f.PhysicalBlock == sb.Block && f.PhysicalSubblock == sb.SubBlock
	})
	return addr
}
