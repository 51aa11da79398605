package testworld

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunMain is the body of a test package's TestMain: it builds the world if
// needed (a no-op once cached), starts one world for the package, stores it
// in *w, runs the tests and stops the world. It returns the exit code for
// os.Exit. The world's start-up time is printed, so `go test -v` shows it.
//
//	var world *testworld.World
//	func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }
//
// Processes are stopped on return; if the test binary dies instead (a
// panic, go test's -timeout), the kernel kills them (see startChild).
func RunMain(m *testing.M, w **World) int {
	dir, err := Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworld:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := Build(ctx, dir, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "testworld:", err)
		return 1
	}
	startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelStart()
	world, err := Start(startCtx, Options{Dir: dir, KeepDir: os.Getenv("MH_TESTWORLD_KEEP") != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworld: start:", err)
		return 1
	}
	fmt.Printf("testworld: warm start-up %s (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)\n",
		world.StartupTime.Round(time.Millisecond))
	*w = world
	code := m.Run()
	if err := world.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testworld: stop:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
