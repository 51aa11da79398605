package testworld

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Child processes get SIGKILL from the kernel when the thread that started
// them dies (Pdeathsig). Go may retire an OS thread, so every child is
// started from one goroutine locked to its thread for the life of the test
// binary: when the binary exits for any reason (a failed test, a panic, go
// test's -timeout, a SIGKILL) the kernel kills every process of the world.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawner() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the binary
	for req := range spawnCh {
		req.done <- req.cmd.Start()
	}
}

// startChild starts cmd so that it dies with this process.
func startChild(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- req
	return <-req.done
}

// proc is one running component of the world.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // valid after exited is closed
}

func startProc(name, logPath string, bin string, args ...string) (*proc, error) {
	return startProcEnv(name, logPath, nil, bin, args...)
}

// startProcEnv is startProc with env added to this process's environment.
func startProcEnv(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	if err := startChild(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL and waits for the exit.
func (p *proc) stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
	}
	return p.kill()
}

// kill sends SIGKILL at once (a crash, not a shutdown) and waits for the
// exit.
func (p *proc) kill() error {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}

// waitUntil polls ready every interval until it reports true, the process
// exits, or ctx ends.
func (p *proc) waitUntil(ctx context.Context, ready func(context.Context) bool) error {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		if ready(ctx) {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v); log: %s\n%s", p.name, p.err, p.logPath, logTail(p.logPath))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; log: %s\n%s", p.name, ctx.Err(), p.logPath, logTail(p.logPath))
		case <-ticker.C:
		}
	}
}

func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return tail(string(data), 3000)
}
