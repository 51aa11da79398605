package aggregator_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// safetyRecorder watches every Node change and checks, at each one, that no
// pool has more nodes in maintenance this project started than it can
// spare (its size minus min-nodes) or than its cap allows, and that the
// cluster has no more than its cap.
type safetyRecorder struct {
	mu         sync.Mutex
	spare      map[string]int
	poolCap    map[string]int
	clusterCap int
	poolLabel  string
	moments    int
	worst      map[string]int
	violations []string
	triggers   int
}

func (r *safetyRecorder) check(store cache.Store, changed *corev1.Node, old *corev1.Node) {
	inMaintenance := map[string]int{}
	cluster := 0
	for _, o := range store.List() {
		n := o.(*corev1.Node)
		// Started by this project: asked for (the label), or under way
		// as a manual maintenance (the agent's reason).
		_, asked := n.Labels[protocol.LabelPerformMaintenance]
		_, active := n.Labels[protocol.LabelActiveMaintenance]
		if asked || active && n.Annotations[protocol.AnnotationReason] == string(protocol.ReasonManual) {
			inMaintenance[n.Labels[r.poolLabel]]++
			cluster++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.moments++
	if changed != nil && changed.Labels[protocol.LabelPerformMaintenance] != "" && (old == nil || old.Labels[protocol.LabelPerformMaintenance] == "") {
		r.triggers++
	}
	for pool, spare := range r.spare {
		r.worst[pool] = max(r.worst[pool], inMaintenance[pool])
		if limit := min(spare, r.poolCap[pool]); inMaintenance[pool] > limit {
			r.violations = append(r.violations, fmt.Sprintf("pool %s: %d nodes in voluntary maintenance, can spare %d, cap %d (moment %d)",
				pool, inMaintenance[pool], spare, r.poolCap[pool], r.moments))
		}
	}
	r.worst["cluster"] = max(r.worst["cluster"], cluster)
	if cluster > r.clusterCap {
		r.violations = append(r.violations, fmt.Sprintf("cluster: %d nodes in voluntary maintenance, cap %d (moment %d)", cluster, r.clusterCap, r.moments))
	}
}

// chaosSeed replays the kill moments of an earlier run (its log says it).
var chaosSeed = flag.Uint64("chaos.seed", 0, "seed of TestSafetyUnderLeaderChaos's kill moments; 0 picks one")

// TestSafetyUnderLeaderChaos: two aggregator processes; the leader is
// SIGKILLed 20 times at random moments while agents (real processes) drain
// the nodes it triggers and the VMs reboot and get new notices. At every
// recorded Node change, no pool has more nodes in maintenance than it can
// spare or its cap allows (chaos-a 1, the default; chaos-b 2), and the
// cluster no more than its cap (2).
func TestSafetyUnderLeaderChaos(t *testing.T) {
	testworld.Need(t)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (run again with: go test ./aggregator -run TestSafetyUnderLeaderChaos -args -chaos.seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	bins, err := vms.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ns := world.Namespace(t)
	const size, minNodes = 6, 4
	pools := map[string]string{"chaos-a": "a", "chaos-b": "b"}
	f := &vms.Fleet{World: world, AgentBin: filepath.Join(bins, "agent"), AgentArgs: []string{"--eviction-retry-interval", "1s", "--log-level", "warn"}}
	t.Cleanup(func() {
		for _, v := range f.VMs {
			_ = v.Agent.Kill()
		}
		f.Close()
	})
	ctx := testworld.Ctx(t, 10*time.Minute)
	window := time.Now().Add(3 * 24 * time.Hour)
	for pool, short := range pools {
		for i := range size {
			name := fmt.Sprintf("chaos-%s-%d", short, i)
			v, err := f.Add(ctx, testworld.NodeSpec{Name: name, Pool: pool}, gceemu.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = world.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
			v.Emu.SetPerformMaintenanceDelay(500 * time.Millisecond)
			v.Emu.ScheduleNotice(gceemu.ScheduledNotice(window, 4*time.Hour))
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := world.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Annotations[protocol.AnnotationOpportunisticConfig] = fmt.Sprintf("node-idle-time=1s,min-nodes=%d,window=2419200s", minNodes)
				_, err = world.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	configMap(t, ns, "cluster: {maxVoluntaryMaintenance: \"2\"}\npools:\n  chaos-b: {maxVoluntaryMaintenance: \"2\"}\n")
	rec := &safetyRecorder{spare: map[string]int{"chaos-a": size - minNodes, "chaos-b": size - minNodes}, poolCap: map[string]int{"chaos-a": 1, "chaos-b": 2},
		clusterCap: 2, poolLabel: testworld.LabelNodePool, worst: map[string]int{}}
	factory := informers.NewSharedInformerFactory(world.Client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { rec.check(inf.GetStore(), o.(*corev1.Node), nil) },
		UpdateFunc: func(o, n any) { rec.check(inf.GetStore(), n.(*corev1.Node), o.(*corev1.Node)) },
	})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go inf.Run(watchCtx.Done())

	aggregators := map[string]*testworld.Process{}
	startAgg := func(id string) { // a new replica: a new name, as a new pod would have
		p, err := world.StartProcess("aggregator-"+id, filepath.Join(bins, "aggregator"), "--kubeconfig", world.AggregatorKubeconfigT(t, ns), "--namespace", ns,
			"--identity", id, "--config-map", "maintenance-handler", "--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "250ms",
			"--interval", "1s", "--listen-address", testworld.FreeAddrT(t), "--log-level", "warn")
		if err != nil {
			t.Fatal(err)
		}
		aggregators[id] = p
	}
	startAgg("agg-0")
	startAgg("agg-1")
	var killed []*testworld.Process
	t.Cleanup(func() {
		for _, p := range aggregators {
			_ = p.Kill()
		}
		for _, p := range killed {
			_ = p.Kill()
		}
	})

	// The VMs: a node the agent marked terminating stops and comes back,
	// and Compute Engine schedules its next maintenance.
	rebooted := 0
	var rebootMu sync.Mutex
	rebootedFor := map[string]string{} // node -> the maintenance (its start) it was last rebooted for
	rebootCtx, stopReboots := context.WithCancel(ctx)
	rebootsDone := make(chan struct{})
	go func() {
		defer close(rebootsDone)
		for rebootCtx.Err() == nil {
			for _, v := range f.VMs {
				n, err := world.Client.CoreV1().Nodes().Get(rebootCtx, v.Name, metav1.GetOptions{})
				started := n.Annotations[protocol.AnnotationStarted]
				if err != nil || n.Labels[protocol.LabelActiveMaintenance] != protocol.ValueTerminating || rebootedFor[v.Name] == started {
					continue // not terminating, or rebooted and the agent has not caught up yet
				}
				if err := f.Reboot(rebootCtx, v); err != nil {
					continue
				}
				rebootedFor[v.Name] = started
				v.Emu.ScheduleNotice(gceemu.ScheduledNotice(window, 4*time.Hour))
				rebootMu.Lock()
				rebooted++
				rebootMu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	holders := map[string]bool{}
	for i := range 20 {
		time.Sleep(time.Duration(300+rng.IntN(2200)) * time.Millisecond) // the chaos: a random moment
		lease, err := world.Client.CoordinationV1().Leases(ns).Get(ctx, "maintenance-handler-aggregator", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || aggregators[*lease.Spec.HolderIdentity] == nil {
			continue
		}
		leader := *lease.Spec.HolderIdentity
		holders[leader] = true
		killed = append(killed, aggregators[leader])
		if err := aggregators[leader].Kill(); err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d: %s", i+1, leader)
		delete(aggregators, leader)
		startAgg(fmt.Sprintf("agg-%d", i+2))
	}
	// The last leader at work: until it has triggered two more nodes, and
	// the whole run has done enough to prove something (how much the
	// chaos itself gets done depends on the machine's load; a claim of a
	// killed leader holds its slot until its Node changes).
	rec.mu.Lock()
	before := rec.triggers
	rec.mu.Unlock()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rebootMu.Lock()
		defer rebootMu.Unlock()
		return rec.triggers >= before+2 && rec.triggers >= size && rebooted >= size/2, nil
	})
	if err != nil {
		t.Errorf("the last leader did not trigger enough after the chaos (%d triggers before it)", before)
	}
	stopReboots()
	<-rebootsDone

	rec.mu.Lock()
	defer rec.mu.Unlock()
	rebootMu.Lock()
	defer rebootMu.Unlock()
	t.Logf("%d Node changes recorded, %d triggers, %d reboots, worst in maintenance per pool %v, leaders seen %v", rec.moments, rec.triggers, rebooted, rec.worst, holders)
	if len(rec.violations) > 0 {
		t.Errorf("%d moments with more nodes in maintenance than a pool can spare or a cap allows; first: %s", len(rec.violations), rec.violations[0])
	}
	if rec.triggers < size || rebooted < size/2 {
		t.Errorf("too little happened to prove anything: %d triggers, %d reboots", rec.triggers, rebooted)
	}
	if len(holders) < 2 {
		t.Errorf("leadership never changed hands: %v", holders)
	}
}
