package testworld

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sweepRealNode removes everything a real node puts on the machine, from
// a node stopping now or one whose test binary was killed: every process
// in the node's cgroups, the shims and daemons built for it, every mount
// under its root, the root, the host paths it created, its cgroups and its
// bridges. The caller holds the real-node lock. Each step runs even when
// an earlier one failed.
func sweepRealNode(progress io.Writer) error {
	root := realNodeRoot()
	var errs []error
	if n := killCgroupProcs(); n > 0 {
		fmt.Fprintf(progress, "testworld: killed %d processes of a real node\n", n)
	}
	if dir, err := NodeDir(); err == nil {
		killByExe(filepath.Join(dir, "bin") + string(filepath.Separator))
	}
	errs = append(errs, unmountUnder(root))
	if data, err := os.ReadFile(filepath.Join(root, createdPathsFile)); err == nil {
		for _, p := range strings.Fields(string(data)) {
			errs = append(errs, os.RemoveAll(p))
		}
	}
	errs = append(errs, os.RemoveAll(root))
	errs = append(errs, removeCgroups())
	for _, link := range []string{realNodeLink, realPodLink} {
		errs = append(errs, deleteLink(link))
	}
	return errors.Join(errs...)
}

// RealNodeLeftovers lists what a real node left on the machine, for the
// leak check: its root, its bridges and its cgroups.
func RealNodeLeftovers() []string {
	var left []string
	if _, err := os.Stat(realNodeRoot()); err == nil {
		left = append(left, realNodeRoot())
	}
	for _, link := range []string{realNodeLink, realPodLink} {
		if _, err := net.InterfaceByName(link); err == nil {
			left = append(left, "link "+link)
		}
	}
	for _, d := range cgroupDirs() {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}

// SweepRealNodeLeftovers removes what a real node left behind when no real
// node runs on this machine (the lock is free) and lists what it removed;
// while one runs it removes nothing.
func SweepRealNodeLeftovers() ([]string, error) {
	f, err := os.OpenFile(realNodeLockPath(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, nil // a real node is running
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // released on close anyway
	left := RealNodeLeftovers()
	if len(left) == 0 {
		return nil, nil
	}
	return left, sweepRealNode(io.Discard)
}

// cgroupTree lists dir and every cgroup below it, deepest first.
func cgroupTree(dir string) []string {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	return dirs
}

// cgroupPids lists the processes in the node's cgroups, each once.
func cgroupPids() []int {
	var pids []int
	seen := map[int]bool{}
	for _, root := range cgroupDirs() {
		for _, d := range cgroupTree(root) {
			data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// killCgroupProcs SIGKILLs every process in the node's cgroups until none
// is left (a process may fork while it is being killed) and returns how
// many it killed.
func killCgroupProcs() int {
	killed := map[int]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pids := cgroupPids()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			killed[pid] = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return len(killed)
}

// processesByExe lists the processes whose executable lies under prefix.
func processesByExe(prefix string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.HasPrefix(exe, prefix) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killByExe SIGKILLs every process whose executable lies under prefix and
// waits until they are gone.
func killByExe(prefix string) {
	pids := processesByExe(prefix)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// zombie: pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// unmountUnder detaches every mount at or below root, deepest first,
// until none is left.
func unmountUnder(root string) error {
	for range 5 {
		mounts, err := mountsUnder(root)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	mounts, _ := mountsUnder(root)
	if len(mounts) > 0 {
		return fmt.Errorf("still mounted under %s: %s", root, strings.Join(mounts, ", "))
	}
	return nil
}

// mountsUnder lists the mount points at or below root, deepest first.
func mountsUnder(root string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == root || strings.HasPrefix(mp, root+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes the node's cgroups in every hierarchy, deepest
// first; a cgroup is removable once its last process has exited, which
// may take a moment after SIGKILL.
func removeCgroups() error {
	var last error
	for range 50 {
		last = nil
		for _, root := range cgroupDirs() {
			for _, d := range cgroupTree(root) {
				if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
					last = fmt.Errorf("remove cgroup %s: %w", d, err)
				}
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil // not there
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %w: %s", name, err, out)
	}
	return nil
}

// relay forwards TCP connections from a listening address to another, as
// kube-proxy would for the kubernetes Service.
type relay struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startRelay(listen, to string) (*relay, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("relay %s: %w", listen, err)
	}
	r := &relay{l: l, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c, to)
			}()
		}
	}()
	return r, nil
}

func (r *relay) track(c net.Conn, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false // closed
	}
	if on {
		r.conns[c] = true
	} else {
		delete(r.conns, c)
	}
	return true
}

func (r *relay) pipe(in net.Conn, to string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	if !r.track(in, true) || !r.track(out, true) {
		return
	}
	defer r.track(in, false)
	defer r.track(out, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// close stops listening, closes every relayed connection and waits for
// the relay's goroutines.
func (r *relay) close() {
	r.l.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
