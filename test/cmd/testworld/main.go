// Command testworld builds the test world (kube-apiserver,
// kube-controller-manager, kube-scheduler, etcd and kwok from pinned Go
// modules) into a cache directory outside the repository, and prints where
// it is.
//
//	testworld build       build once, reuse afterwards
//	testworld build-node  build a real node's kubelet, containerd, runc and
//	                      CNI plugins once, reuse afterwards (nothing where
//	                      the machine cannot run one)
//	testworld build-helm  build the pinned helm once, reuse afterwards
//	testworld helm        the same, then print the helm binary's path (make
//	                      generate renders the chart with it)
//	testworld build-jobset  build JobSet's controller once, reuse
//	                      afterwards
//	testworld build-kubectl  build kubectl at the world's Kubernetes
//	                      version once, for the benchmark beside kubectl drain
//	testworld dir         print the cache directory
//	testworld leaks       fail (and kill them) if processes of a world still
//	                      run (only this run's when MH_TESTWORLD_RUN is set)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testworld:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: testworld build|build-node|build-helm|helm|build-jobset|build-kubectl|dir|leaks")
	}
	dir, err := testworld.Dir()
	if err != nil {
		return err
	}
	switch args[0] {
	case "build":
		return testworld.Build(ctx, dir, os.Stdout)
	case "build-node":
		if err := testworld.RealNodeSupport(); err != nil {
			fmt.Printf("testworld: no real node on this machine (%v); its tests will be skipped\n", err)
			return nil
		}
		nodeDir, err := testworld.NodeDir()
		if err != nil {
			return err
		}
		return testworld.BuildNode(ctx, nodeDir, os.Stdout)
	case "build-helm":
		helmDir, err := testworld.HelmDir()
		if err != nil {
			return err
		}
		return testworld.BuildHelm(ctx, helmDir, os.Stdout)
	case "helm":
		helmDir, err := testworld.HelmDir()
		if err != nil {
			return err
		}
		if err := testworld.BuildHelm(ctx, helmDir, os.Stderr); err != nil {
			return err
		}
		fmt.Println(filepath.Join(helmDir, "bin", "helm"))
		return nil
	case "build-jobset":
		jobSetDir, err := testworld.JobSetDir()
		if err != nil {
			return err
		}
		return testworld.BuildJobSet(ctx, jobSetDir, os.Stdout)
	case "build-kubectl":
		kubectlDir, err := testworld.KubectlDir()
		if err != nil {
			return err
		}
		return testworld.BuildKubectl(ctx, kubectlDir, os.Stdout)
	case "dir":
		fmt.Println(dir)
		return nil
	case "leaks":
		return testworld.CheckLeaks(dir, os.Stdout)
	default:
		return fmt.Errorf("unknown command %q: want build, dir or leaks", args[0])
	}
}
