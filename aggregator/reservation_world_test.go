package aggregator_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/maintenance-handler/maintenance-handler/internal/plugin"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestReservationSubBlockMaintainedAsOne: four GPU nodes of one sub-block
// of a GROUPED reservation (GKE's topology labels), each with a real agent
// run with --reservation-groups subblock, and a maintenance pending on
// every VM. A person asks for it on one node: every node drains with it,
// and nobody asks Compute Engine while one node's pod is still held by its
// budget. Once that pod is evicted, one call, on the sub-block
// (reservationSubBlocks.performMaintenance), starts the maintenance of
// every VM in it, which every other node takes as its group's: counted
// once, by the node that asked. An aggregator reading the reservation
// (--reservations) says the sub-block's pending and then ongoing hosts on
// every node, in its metrics and in the plugin's status; before anything
// else, it maintains the block's two spare hosts (UNUSED_CAPACITY), once.
// As installed by default, the nodes hold no Compute Engine permission:
// the group's call is the aggregator's, at the asking node's request.
func TestReservationSubBlockMaintainedAsOne(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	p := newProcs(t, "--eviction-retry-interval", "1s", "--reservation-groups", "subblock")
	project, err := gceemu.NewProject()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(project.Close)
	p.f.Project = project
	sb := gceemu.SubBlock{Reservation: "a4x-res", Block: "block-7", SubBlock: "sub-3"}
	hosts, emus := subBlockMembers(t, ctx, p, sb, "nvl", "a4x", 4)
	emus[0].SetSpareHosts(2, true) // the block has two hosts with no VM, their maintenance pending too
	world.WaitNodes(t, hosts, "mirrored their notices", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	for i := range hosts {
		world.WaitPod(t, p.ns, fmt.Sprintf("rank-%d", i), "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	patchPod(t, ctx, p.ns, "rank-2", func(p *corev1.Pod) { p.Labels["guard"] = "yes" })
	pdb := holdOne(t, ctx, p.ns, map[string]string{"guard": "yes"})
	evicted := firstSeen(t, ctx, podsOf(p.ns), podDeleted)

	// The aggregator reads the reservation through the Compute API (one
	// emulator answers for it): the sub-block's four pending hosts, on each
	// node, in the metric and in the plugin's status.
	metricsAddr := testworld.FreeAddrT(t)
	reservation := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation)
	agg, err := world.StartProcessEnv("aggregator-nvl", []string{"GCE_METADATA_HOST=" + project.Identity.Host()}, filepath.Join(p.bins, "aggregator"),
		"--kubeconfig", world.AggregatorKubeconfigT(t, p.ns), "--namespace", p.ns, "--identity", "agg-nvl", "--interval", "1s", "--listen-address", metricsAddr, "--log-level", "warn",
		"--reservation-groups", "subblock", "--reservations", reservation, "--reservation-interval", "1s", "--compute-endpoint", project.ComputeEndpoint(),
		"--maintain-unused-capacity")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })
	world.WaitNodes(t, hosts, "told of their sub-block's pending maintenance", func(n *corev1.Node) bool {
		rg, ok := protocol.ReadReservationGroup(n)
		return ok && rg.SubBlock == sb.SubBlock && rg.Pending == 4 && rg.Ongoing == 0 && rg.Health == "HEALTHY"
	})
	waitMetric(t, ctx, metricsAddr, `maintenance_handler_aggregator_reservation_group_hosts{group="`+sb.Block+"/"+sb.SubBlock+`",reservation="`+sb.Reservation+`",scope="subblock",state="pending"}`, 4)
	// The block's two spare hosts are maintained first, once: no node is
	// touched, and the block's pending hosts are its four in use.
	waitMetric(t, ctx, metricsAddr, `maintenance_handler_aggregator_unused_capacity_maintenance_total{block="`+sb.Block+`",outcome="accepted",reservation="`+sb.Reservation+`"}`, 1)
	waitMetric(t, ctx, metricsAddr, `maintenance_handler_aggregator_reservation_group_hosts{group="`+sb.Block+`",reservation="`+sb.Reservation+`",scope="block",state="pending"}`, 4)
	if calls := emus[0].Calls(); len(calls) != 1 || calls[0].Method != "reservationBlocks.performMaintenance" || calls[0].Scope != "UNUSED_CAPACITY" {
		t.Fatalf("calls %+v; want one, the block's unused capacity", calls)
	}
	for _, h := range hosts {
		if n, err := world.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{}); err != nil || protocol.ReadAgentState(n).Active() {
			t.Fatalf("%s: %v, in maintenance %t; want it in service while the spare hosts are maintained", h, err, err == nil)
		}
	}
	world.WaitNodes(t, hosts, "told of their block's pending hosts, its spare ones maintained", func(n *corev1.Node) bool {
		rg, ok := protocol.ReadReservationGroup(n)
		return ok && rg.BlockPending == 4
	})
	c, _ := clients(t)
	in, err := plugin.Read(ctx, c, time.Now(), plugin.ReadOptions{Pool: "a4x", PoolLabel: protocol.LabelNodePool, ReservationGroups: protocol.ReservationGroupSubblock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := plugin.BuildStatus(in).WriteTable(&table, time.Now(), time.UTC, false); err != nil {
		t.Fatal(err)
	}
	if out := table.String(); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sb.Block+"/"+sb.SubBlock) + `\s+` + sb.Reservation + `\s+subblock\s+4\s+0\s.*\s4\s+0\s*$`).MatchString(out) {
		t.Errorf("the plugin's status shows no line for the sub-block with 4 hosts pending, and its block's 4:\n%s", out)
	}

	setLabel(t, ctx, "nvl-0", protocol.LabelPerformMaintenance, protocol.TriggerValue)
	world.WaitNodes(t, []string{"nvl-1", "nvl-3"}, "drained with their group", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonSlice && st.Phase == protocol.PhaseTerminating
	})
	world.WaitNodes(t, []string{"nvl-0"}, "drained, waiting for its group", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonManual && st.Drain == protocol.DrainDone
	})
	held := world.WaitNode(t, "nvl-2", "draining with its group", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonSlice && protocol.HasTaint(n)
	})
	if st := protocol.ReadAgentState(held); st.Phase != protocol.PhaseDraining {
		t.Fatalf("nvl-2 is %s while its budget holds its pod", st.Phase)
	}
	if n := callsTo(emus); n != 1 {
		t.Fatalf("%d Compute Engine calls while nvl-2 still drains, want only the spare hosts' one", n)
	}

	if err := world.Client.PolicyV1().PodDisruptionBudgets(p.ns).Delete(ctx, pdb, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	world.WaitNodes(t, []string{"nvl-1", "nvl-2", "nvl-3"}, "in their group's maintenance", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Reason == protocol.ReasonHostMaintenance
	})
	world.WaitNodes(t, hosts, "told that their sub-block's maintenance is under way", func(n *corev1.Node) bool {
		rg, ok := protocol.ReadReservationGroup(n)
		return ok && rg.Pending == 0 && rg.Ongoing == 4
	})
	world.WaitNodes(t, []string{"nvl-0"}, "asked, and its maintenance begun", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Phase == protocol.PhaseTerminating && st.Begun
	})
	var calls []gceemu.Call
	for _, e := range emus {
		for _, c := range e.Calls() {
			if c.Scope != "UNUSED_CAPACITY" {
				calls = append(calls, c)
			}
		}
	}
	last := evicted.at("rank-2")
	want := fmt.Sprintf("projects/%s/zones/%s/reservations/%s/reservationBlocks/%s/reservationSubBlocks/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation, sb.Block, sb.SubBlock)
	if len(calls) != 1 || calls[0].Method != "reservationSubBlocks.performMaintenance" || calls[0].Resource != want || last.IsZero() || !calls[0].At.After(last) ||
		calls[0].Token != project.Identity.AccessToken() {
		t.Fatalf("calls %+v; want one, on the sub-block %s, after rank-2 was evicted at %s, with the aggregator's token", calls, want, last.Format(time.RFC3339Nano))
	}
	t.Logf("the last member's pod evicted at %s; the group's one call %s later", last.Format(time.RFC3339Nano), calls[0].At.Sub(last))
	manual, _ := protocol.ReasonManual.Interruption()
	for _, h := range hosts {
		n, err := world.Client.CoreV1().Nodes().Get(ctx, h, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if h == "nvl-0" {
			want = 1
		}
		if got := protocol.ReadAgentState(n).Interruptions; got[manual.Key()] != want || len(got) > want {
			t.Errorf("%s counted %v; want %d of %s", h, got, want, manual.Key())
		}
	}
}

// TestReservationMemberStopsAlone: four GPU nodes of one sub-block of a
// GROUPED reservation, each with a real agent run with
// --reservation-groups subblock, a maintenance pending on every VM. One
// member's own host maintenance begins (its VM's notice ONGOING and
// TERMINATE_ON_HOST_MAINTENANCE), then another's VM is preempted: each
// drains alone, and their siblings keep their pods and are never asked to
// drain. A person's request on a sibling afterwards drains the whole
// group (so every member's agent had seen the others' states before), and
// the group's one call goes to the sub-block, whose four hosts in use are
// the four members the cluster drained.
func TestReservationMemberStopsAlone(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 5*time.Minute)
	p := newProcs(t, "--eviction-retry-interval", "1s", "--reservation-groups", "subblock")
	sb := gceemu.SubBlock{Reservation: "a3-res", Block: "block-2", SubBlock: "sub-1"}
	hosts, emus := subBlockMembers(t, ctx, p, sb, "mem", "a3", 4)
	world.WaitNodes(t, hosts, "mirrored their notices", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	for i := range hosts {
		world.WaitPod(t, p.ns, fmt.Sprintf("rank-%d", i), "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	// When each member first began to drain, and each pod was first told
	// to stop, through watches.
	draining := firstSeen(t, ctx, informers.NewSharedInformerFactory(world.Client, 0).Core().V1().Nodes().Informer(), func(o any) (string, bool) {
		n := o.(*corev1.Node)
		return n.Name, protocol.ReadAgentState(n).Active()
	})
	deleted := firstSeen(t, ctx, podsOf(p.ns), podDeleted)

	emus[0].SetNoticeStatus(gceemu.StatusOngoing)
	emus[0].SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNodes(t, []string{"mem-0"}, "drained for its own host maintenance", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonHostMaintenance && st.Phase == protocol.PhaseTerminating
	})
	emus[3].SetPreempted(true)
	world.WaitNodes(t, []string{"mem-3"}, "drained for its own preemption", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonPreemption && st.Phase == protocol.PhaseTerminating
	})
	asked := time.Now()
	setLabel(t, ctx, "mem-1", protocol.LabelPerformMaintenance, protocol.TriggerValue)
	world.WaitNodes(t, []string{"mem-2"}, "drained with its group, for the person's request", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Reason == protocol.ReasonSlice && st.Phase == protocol.PhaseTerminating
	})
	world.WaitNodes(t, []string{"mem-1"}, "asked, and its group's maintenance begun", func(n *corev1.Node) bool {
		st := protocol.ReadAgentState(n)
		return st.Phase == protocol.PhaseTerminating && st.Begun
	})
	for _, h := range []string{"mem-1", "mem-2"} {
		if at := draining.at(h); !at.IsZero() && at.Before(asked) {
			t.Errorf("%s began to drain at %s, before the person asked (%s): a member's own host maintenance took it", h, at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
		}
	}
	for _, pod := range []string{"rank-1", "rank-2"} {
		if at := deleted.at(pod); !at.IsZero() && at.Before(asked) {
			t.Errorf("%s deleted at %s, before the person asked (%s)", pod, at.Format(time.RFC3339Nano), asked.Format(time.RFC3339Nano))
		}
	}
	for _, pod := range []string{"rank-0", "rank-3"} {
		if deleted.at(pod).IsZero() {
			t.Errorf("%s was not stopped for its node's own maintenance", pod)
		}
	}
	want := fmt.Sprintf("projects/%s/zones/%s/reservations/%s/reservationBlocks/%s/reservationSubBlocks/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation, sb.Block, sb.SubBlock)
	var calls []gceemu.Call
	for _, e := range emus {
		calls = append(calls, e.Calls()...)
	}
	if len(calls) != 1 || calls[0].Method != "reservationSubBlocks.performMaintenance" || calls[0].Resource != want {
		t.Errorf("calls %+v; want one, on the sub-block %s", calls, want)
	}
}

// subBlockMembers adds n GPU nodes of pool, named prefix-0 and on, to sb
// (GKE's topology labels, one emulated VM each in the reservation, what
// proves them members read or written: proveVMs), each
// with a maintenance pending and a pod rank-I (label job=train, 5 s of
// grace).
func subBlockMembers(t *testing.T, ctx context.Context, p *procs, sb gceemu.SubBlock, prefix, pool string, n int) ([]string, []*gceemu.Server) {
	t.Helper()
	var hosts []string
	var emus []*gceemu.Server
	members := map[*gceemu.Server]gceemu.SubBlock{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		hosts = append(hosts, name)
		v, err := p.f.Add(ctx, testworld.NodeSpec{Name: name, Pool: pool, Labels: map[string]string{protocol.LabelTopologyBlock: sb.Block, protocol.LabelTopologySubblock: sb.SubBlock}},
			gceemu.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		emus = append(emus, v.Emu)
		members[v.Emu] = sb
		v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(72*time.Hour), 4*time.Hour))
		grace := int64(5)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rank-%d", i), Namespace: p.ns, Labels: map[string]string{"job": "train"}},
			Spec: corev1.PodSpec{NodeName: name, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "train", Image: "trainer"}}}}
		if _, err := world.Client.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gceemu.JoinReservation(members)
	if p.f.Project == nil {
		// The agents make their own calls: none asks the aggregator to
		// read its VM, so the test writes what that read says.
		res := fmt.Sprintf("projects/%s/zones/%s/reservations/%s", emus[0].Config().Project, emus[0].Config().Zone, sb.Reservation)
		proveVMs(t, ctx, protocol.VMFacts{Status: "RUNNING", Reservation: res, Block: res + "/reservationBlocks/" + sb.Block,
			SubBlock: res + "/reservationBlocks/" + sb.Block + "/reservationSubBlocks/" + sb.SubBlock, PhysicalBlock: sb.Block, PhysicalSubblock: sb.SubBlock}, hosts...)
	}
	return hosts, emus
}

// seen is when, through a watch, each object first met a condition.
type seen struct {
	mu    sync.Mutex
	first map[string]time.Time
}

// at is when name first met the condition (zero: not yet).
func (s *seen) at(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first[name]
}

// firstSeen runs inf until t ends and records when each object first met
// cond (which names it); it returns once inf has listed.
func firstSeen(t *testing.T, ctx context.Context, inf cache.SharedIndexInformer, cond func(any) (string, bool)) *seen {
	t.Helper()
	s := &seen{first: map[string]time.Time{}}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		if name, ok := cond(o); ok {
			s.mu.Lock()
			if _, was := s.first[name]; !was {
				s.first[name] = time.Now()
			}
			s.mu.Unlock()
		}
	}})
	watchCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go inf.Run(watchCtx.Done())
	cache.WaitForCacheSync(watchCtx.Done(), inf.HasSynced)
	return s
}

// podsOf is an informer of the pods of ns.
func podsOf(ns string) cache.SharedIndexInformer {
	return informers.NewSharedInformerFactoryWithOptions(world.Client, 0, informers.WithNamespace(ns)).Core().V1().Pods().Informer()
}

// podDeleted: the pod is told to stop (its deletion timestamp set).
func podDeleted(o any) (string, bool) {
	pod := o.(*corev1.Pod)
	return pod.Name, pod.DeletionTimestamp != nil
}
