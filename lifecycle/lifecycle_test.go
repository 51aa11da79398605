package lifecycle

// The state machine's model test, run: the histories of model_test.go's
// model drawn from a seed (runModel), on the fixed seeds make test runs,
// on random ones for a soak, and on the seeds that once found a defect.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	modelSeed          = flag.Uint64("model.seed", 0, "replay the state machine model test from this seed (0: the first fixed seed)")
	modelHistories     = flag.Int("model.histories", 3000, "histories the state machine model test generates (a seed's, in a soak)")
	modelFixed         = flag.Bool("model.fixed", false, "run every fixed seed of testdata/model-seeds.txt for its histories")
	modelSoak          = flag.Duration("model.soak", 0, "draw random seeds for this long")
	modelSoakHistories = flag.Int("model.soak-histories", 0, "draw random seeds until this many histories have run")
)

// TestStateMachineModel runs thousands of random histories of metadata
// answers, a person's labels and cordons, drains ending, Compute Engine's
// answers, reboots, agent restarts and time, reconciling after each
// happening through a Node round trip, and checks the invariants after
// every step. It is the same on every run: by default it runs the first
// of the fixed seeds (testdata/model-seeds.txt) for -model.histories
// histories; -model.seed replays another seed; -model.fixed runs every
// fixed seed for the histories the file gives it (make test); -model.soak
// draws random seeds for a time, or -model.soak-histories for a number of
// histories (make soak). A failure names its seed and history as a line
// for regressionSeeds.
func TestStateMachineModel(t *testing.T) {
	switch {
	case *modelSoak > 0 || *modelSoakHistories > 0:
		soakModel(t, *modelSoak, *modelSoakHistories, *modelHistories)
		return
	case *modelFixed:
		seeds := fixedSeeds(t)
		total := 0
		for _, s := range seeds {
			total += s.histories
		}
		t.Logf("%d fixed seeds, %d histories in all", len(seeds), total)
		for _, s := range seeds {
			t.Run(fmt.Sprint(s.seed), func(t *testing.T) {
				t.Parallel()
				runModel(t, s.seed, 0, s.histories)
			})
		}
		return
	}
	seed := *modelSeed
	if seed == 0 {
		seed = fixedSeeds(t)[0].seed
	}
	t.Logf("seed %d (replay: go test ./lifecycle -run 'TestStateMachineModel$' -args -model.seed %d)", seed, seed)
	histories := *modelHistories
	if testing.Short() {
		histories /= 10
	}
	runModel(t, seed, 0, histories)
}

// fixedSeed is a seed make test's model step runs, for histories
// histories.
type fixedSeed struct {
	seed      uint64
	histories int
}

// fixedSeeds reads testdata/model-seeds.txt: a seed and its histories a
// line; # starts a comment.
func fixedSeeds(t *testing.T) []fixedSeed {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "model-seeds.txt"))
	if err != nil {
		t.Fatalf("read the fixed seeds: %v", err)
	}
	var seeds []fixedSeed
	for i, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		var s fixedSeed
		if _, err := fmt.Sscanf(line, "%d %d", &s.seed, &s.histories); err != nil || s.histories <= 0 {
			t.Fatalf("testdata/model-seeds.txt:%d: %q is not a seed and its histories (%v)", i+1, line, err)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 {
		t.Fatal("testdata/model-seeds.txt lists no seed")
	}
	return seeds
}

// soakModel draws random seeds, each run for perSeed histories on as many
// goroutines as GOMAXPROCS, until d has passed (d > 0) or histories have
// run (histories > 0), whichever comes first; a failing seed fails its
// subtest with its regression line, and the soak stops.
func soakModel(t *testing.T, d time.Duration, histories, perSeed int) {
	start := time.Now()
	var mu sync.Mutex
	ran, seeds, failed := 0, []uint64{}, false
	next := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if failed || d > 0 && time.Since(start) >= d || histories > 0 && ran >= histories {
			return 0, false
		}
		ran += perSeed
		seeds = append(seeds, rand.Uint64())
		return seeds[len(seeds)-1], true
	}
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := next()
				if !ok {
					return
				}
				if !t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 0, perSeed) }) {
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("soak: %d seeds, %d histories (%d each), in %s; the seeds: %v", len(seeds), ran, perSeed, time.Since(start).Round(time.Second), seeds)
}

// regressionSeeds are seeds whose histories once found a defect, in the
// rules or in the model, each with the histories it takes to reach it
// (from the first it replays: the one that failed, where it is known);
// every run replays them.
var regressionSeeds = []struct {
	seed            uint64
	from, histories int
	what            string
}{
	{220040227790608171, 0, 3000, "a reboot ends a manual maintenance in the pass that begins the slice's: what it counts is the manual one's; and (with faults modelled) a preemption that took a fault's repair over, drained, was counted again as the repair when the VM came back"},
	{5827604864258396149, 0, 100, "a fault's report refused while TERMINATE_ON_HOST_MAINTENANCE was served left the node idle: the host maintenance it did not yield to once asked must start"},
	{16268931667043886016, 0, 678, "with known ends modelled: a repair whose approval was withdrawn left the node idle within the lead of its known end for a step"},
	{12732717944473127520, 0, 5758, "with faults and known ends modelled: a preemption took over a repair whose report Compute Engine had taken and was withdrawn; the repair approved again reported a second time while the first report's operation ran"},
	{13278967456778092038, 18281, 18282, "with faults modelled: a report answered in the step that saw the preemption which took its repair over withdrawn; the repair approved again reported a second time while the first report's operation ran"},
	{15374168629025501662, 0, 226, "with known ends modelled: an end moved later within the lead ended the drain and began it anew, counted twice"},
	{12830704362261076403, 24064, 24065, "with faults and known ends modelled: a report's answer came only after a preemption took its repair over and was withdrawn; the repair approved again reported a second time while the first report's operation ran (the call is now the node's, whatever maintenance ends)"},
	{6377037596056492441, 15439, 15440, "with faults modelled: the same class by another path: a repair approved again reported a second time while the report of the repair before it ran"},
}

// TestStateMachineModelRegressions replays regressionSeeds.
func TestStateMachineModelRegressions(t *testing.T) {
	for _, r := range regressionSeeds {
		t.Run(fmt.Sprint(r.seed), func(t *testing.T) { runModel(t, r.seed, r.from, r.histories) })
	}
}

// runModel steps through histories random histories drawn from seed,
// from the history numbered from on.
func runModel(t *testing.T, seed uint64, from, histories int) {
	t.Helper()
	root := rand.New(rand.NewPCG(seed, seed))
	for h := range histories {
		m := newModel(root.Uint64())
		if h < from {
			continue
		}
		m.seed, m.history = seed, h
		steps := 20 + m.rng.IntN(60)
		for range steps {
			m.event()
			m.reconcile(t)
		}
		m.settle(t)
	}
}
