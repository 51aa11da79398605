// Command demo shows maintenance-handler at work on a simulated GPU node
// pool, without a cloud account: it starts the test world (a real control
// plane with kwok playing the kubelets), five GPU nodes each with its own
// emulated metadata server and its own agent process, two aggregators, a
// training Deployment with a PodDisruptionBudget and a 60 s grace period,
// and a few system pods.
// Then it plays a scenario and prints a timeline per node and pod:
//
//  1. Compute Engine schedules maintenance on every node: the
//     scheduled-maintenance-time label appears.
//  2. The aggregator picks the idle spare node and starts its maintenance
//     early; the busy nodes say why they were not picked.
//  3. A person labels a node cloud.google.com/perform-maintenance: first
//     with a value that is rejected, then with true: drain, then
//     performMaintenance on the emulated Compute API, terminating; the VM
//     stops and comes back.
//  4. Compute Engine starts host maintenance on a busy node: taint, ordered
//     and graceful drain, terminating; the VM stops and comes back.
//  5. A Spot node is preempted: drained within 30 s; it comes back.
//  6. One host of a multi-host TPU slice is preempted: the slice is
//     drained as one and comes back as one.
//  7. A GPU fails (its health check's node condition): the node is found
//     faulty, drained, its host reported to the emulated Compute API, and
//     it comes back repaired.
//  8. Where the machine allows (root, overlayfs, a memory cgroup), one real
//     node (a kubelet and containerd) runs a real trainer container with
//     examples/checkpoint/loop.sh: host maintenance there, and its own
//     output shows it checkpoint when told and stop on a real SIGTERM.
//     Elsewhere the demo says why and runs without it.
//
// At the end it prints what each agent's /metrics counted.
//
// Ctrl-C stops everything, leaving no process behind. --keep keeps the
// cluster running after the scenario for exploration with kubectl.
// --short gives the trainer a 10 s grace instead of 60 s, so the whole run
// takes about two minutes; CI runs it that way (demo_test.go) and checks the
// timeline for the scenario's key moments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

func main() {
	var opts options
	flag.StringVar(&opts.agentBin, "agent-bin", "bin/agent", "path of the agent binary (make demo builds it)")
	flag.StringVar(&opts.aggregatorBin, "aggregator-bin", "bin/aggregator", "path of the aggregator binary (make demo builds it)")
	flag.BoolVar(&opts.keep, "keep", false, "keep the cluster running after the scenario, until Ctrl-C")
	flag.BoolVar(&opts.short, "short", false, "a shorter run for CI: the trainer's grace is 10 s instead of 60 s")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	agentBin, aggregatorBin string
	keep, short             bool
}

func run(ctx context.Context, opts options) error {
	for _, bin := range []string{opts.agentBin, opts.aggregatorBin} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("binary: %w (run `make demo`, which builds it)", err)
		}
	}
	dir, err := testworld.Dir()
	if err != nil {
		return err
	}
	if !testworld.Built(dir) {
		fmt.Println("demo: first run: building the test world (Kubernetes control plane, etcd, kwok) from Go modules; this takes several minutes, once")
	}
	if err := testworld.Build(ctx, dir, os.Stdout); err != nil {
		return err
	}
	world, err := testworld.Start(ctx, testworld.Options{Dir: dir, Progress: os.Stdout})
	if err != nil {
		return err
	}
	d := &demo{world: world, fleet: &vms.Fleet{World: world, AgentBin: opts.agentBin, AgentArgs: []string{"--eviction-retry-interval", "2s"}},
		aggregatorBin: opts.aggregatorBin, start: time.Now(), grace: 60}
	if opts.short {
		d.grace = 10
	}
	defer func() {
		fmt.Println("demo: stopping the agents, the real node, the control plane and the metadata emulators")
		if d.real != nil {
			if err := d.real.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "demo: stop the real node:", err)
			}
		}
		if err := world.Stop(); err != nil { // agents first: they run as part of the world
			fmt.Fprintln(os.Stderr, "demo: stop:", err)
		}
		d.fleet.Close()
	}()
	if err := d.setUp(ctx); err != nil {
		return err
	}
	if err := d.setUpRealNode(ctx); err != nil {
		return err
	}
	fmt.Printf("\ndemo: cluster ready. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get nodes -L %s -L %s\n", world.Kubeconfig,
		protocol.LabelScheduledMaintenanceTime, protocol.LabelActiveMaintenance)
	for _, v := range d.vms {
		fmt.Printf("  agent metrics of %s: http://%s/metrics\n", v.Name, v.MetricsAddr)
	}
	for _, addr := range d.aggregatorAddrs {
		fmt.Printf("  aggregator metrics: http://%s/metrics\n", addr)
	}
	fmt.Println()
	go d.timeline(ctx)
	if err := d.scenario(ctx); err != nil {
		return err
	}
	if err := d.summary(ctx); err != nil {
		return err
	}
	if opts.keep {
		fmt.Println("\ndemo: scenario done; the cluster keeps running (--keep). Ctrl-C to stop.")
		<-ctx.Done()
		return nil
	}
	fmt.Println("\ndemo: scenario done (run with `make demo DEMO_FLAGS=--keep` to explore afterwards)")
	return nil
}
