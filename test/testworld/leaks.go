package testworld

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ProjectBinaryPrefix names the temp directories into which tests build
// the project's own binaries (os.MkdirTemp("", ProjectBinaryPrefix)), so
// that CheckLeaks finds them too.
const ProjectBinaryPrefix = "mh-test-bin-"

// RunEnv names the run whose processes CheckLeaks looks for. make test
// sets it, to a value of its own, for the tests (every process they start
// inherits it) and for the check after them, so that a world that another
// checkout's tests or a demo kept running (make demo DEMO_FLAGS=--keep)
// started from the same cache is left alone. Unset, every process of the
// cache is looked at.
const RunEnv = "MH_TESTWORLD_RUN"

// CheckLeaks looks for running processes whose executable lies in dir's
// bin directory (a component of some world that outlived its test) or in a
// test's build directory of the project's binaries, and that belong to
// this run ($MH_TESTWORLD_RUN, see RunEnv), kills them, and returns an
// error naming them; it also removes a real node that outlived its test
// (its root, cgroups and bridges) when no other runs. `make test` runs it
// after the tests.
func CheckLeaks(dir string, out io.Writer) error {
	run := os.Getenv(RunEnv)
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	projectBins := filepath.Join(os.TempDir(), ProjectBinaryPrefix)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("read /proc: %w", err)
	}
	var leaked []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !(strings.HasPrefix(exe, bin) || strings.HasPrefix(exe, projectBins)) {
			continue
		}
		if run != "" && !inRun(pid, run) {
			continue // another run's, or a world kept running on purpose
		}
		leaked = append(leaked, fmt.Sprintf("%d %s", pid, filepath.Base(exe)))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	left, err := SweepRealNodeLeftovers()
	if err != nil {
		return fmt.Errorf("a real node outlived the tests (%s) and could not be removed: %w", strings.Join(left, ", "), err)
	}
	if len(leaked) > 0 {
		return fmt.Errorf("%d test-world processes outlived the tests (killed now): %s", len(leaked), strings.Join(leaked, ", "))
	}
	if len(left) > 0 {
		return fmt.Errorf("a real node outlived the tests (removed now): %s", strings.Join(left, ", "))
	}
	fmt.Fprintln(out, "testworld: no test-world process or real node left")
	return nil
}

// inRun: process pid's environment sets RunEnv to run.
func inRun(pid int, run string) bool {
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if kv == RunEnv+"="+run {
			return true
		}
	}
	return false
}
