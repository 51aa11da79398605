package testworld

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunMain is the body of a test package's TestMain. The world starts
// lazily: the first test that calls Need builds it if needed (a no-op once
// cached), starts it and stores it in *w; RunMain stops it after the tests.
// A binary whose tests never call Need (go test -short, or -run naming
// pure tests only) starts no process at all. It returns the exit code for
// os.Exit. The world's start-up time is printed, so `go test -v` shows it.
//
//	var world *testworld.World
//	func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }
//	func TestSomething(t *testing.T) { testworld.Need(t); ... world.Client ... }
//
// Processes are stopped on return; if the test binary dies instead (a
// panic, go test's -timeout), the kernel kills them (see startChild).
func RunMain(m *testing.M, w **World) int {
	shared.target = w
	code := m.Run()
	if world := shared.world; world != nil {
		if err := world.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testworld: stop:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// shared is the test binary's one World, started by the first Need.
var shared struct {
	once   sync.Once
	target **World
	world  *World
	err    error
}

// Need skips tb under -short; otherwise it starts the test binary's World
// on first use (see RunMain) and fails tb if it cannot.
func Need(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs the test world (etcd, kube-apiserver, ...); -short runs the tests that need none")
	}
	if shared.target == nil {
		tb.Fatal("testworld: Need without RunMain in TestMain")
	}
	shared.once.Do(func() {
		shared.world, shared.err = startShared()
		*shared.target = shared.world
	})
	if shared.err != nil {
		tb.Fatalf("testworld: %v", shared.err)
	}
}

func startShared() (*World, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	if err := Build(ctx, dir, os.Stderr); err != nil {
		return nil, err
	}
	var world *World
	// A port freePorts found free can be taken by another process (another
	// package's world, on a busy machine) before the component binds it:
	// that start is stopped whole and made again, on other ports.
	for attempt := 1; ; attempt++ {
		startCtx, cancelStart := context.WithTimeout(ctx, 2*time.Minute)
		world, err = Start(startCtx, Options{Dir: dir, KeepDir: os.Getenv("MH_TESTWORLD_KEEP") != ""})
		cancelStart()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("start: %w", err)
		}
		fmt.Printf("testworld: a port was taken before its component bound it; starting again (%v)\n", err)
	}
	fmt.Printf("testworld: warm start-up %s (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)\n",
		world.StartupTime.Round(time.Millisecond))
	return world, nil
}
