package testworld

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCheckLeaksKillsOnlyItsRun: of two processes running from a world's
// bin directory, CheckLeaks under MH_TESTWORLD_RUN kills and names the one
// of its run, and leaves the other's (another checkout's tests, a demo
// kept running) alone.
func TestCheckLeaksKillsOnlyItsRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to run:", err)
	}
	body, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "kube-apiserver")
	if err := os.WriteFile(exe, body, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(run string) *exec.Cmd {
		cmd := exec.Command(exe, "300")
		cmd.Env = append(os.Environ(), RunEnv+"="+run)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	mine, theirs := start("this-run"), start("another-run")
	t.Setenv(RunEnv, "this-run")
	err = CheckLeaks(dir, io.Discard)
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(mine.Process.Pid)+" ") || strings.Contains(err.Error(), strconv.Itoa(theirs.Process.Pid)+" ") {
		t.Fatalf("CheckLeaks: %v; want this run's process %d named, and not %d", err, mine.Process.Pid, theirs.Process.Pid)
	}
	if state, _ := mine.Process.Wait(); state == nil || state.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("this run's process ended %v, want killed", state)
	}
	if err := theirs.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the other run's process is gone: %v", err)
	}
}
