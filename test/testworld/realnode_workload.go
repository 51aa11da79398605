package testworld

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// WorkloadImage is test/cmd/workload's image on a real node
// (ImportWorkload): a process that records what it met.
const WorkloadImage = "registry.test/mh/workload:1"

// ImportWorkload builds test/cmd/workload into WorkloadImage on the node.
func (n *RealNode) ImportWorkload(ctx context.Context) error {
	img, err := ProgramImage(ctx, "./test/cmd/workload")
	if err != nil {
		return err
	}
	return n.ImportImage(ctx, WorkloadImage, img)
}

// Workload describes a pod of WorkloadImage on a real node.
type Workload struct {
	Namespace, Name string
	// Grace is terminationGracePeriodSeconds.
	Grace int64
	// ExitOnSIGTERM makes the process exit when SIGTERM comes; otherwise
	// it runs until SIGKILL at the end of its grace.
	ExitOnSIGTERM bool
	Labels        map[string]string
	Annotations   map[string]string
}

// recordPath is where the workload ns/name records, on the host.
func (n *RealNode) recordPath(ns, name string) string {
	return filepath.Join(n.Root, "records", ns+"_"+name+".log")
}

// WorkloadPod is w's pod on this node: the notice annotation as a
// downward-API file where examples/checkpoint reads it, and its record in
// a host folder of the node, named after the pod (Record). Its spec also
// serves as a controller's pod template.
func (n *RealNode) WorkloadPod(w Workload) *corev1.Pod {
	if err := os.MkdirAll(filepath.Join(n.Root, "records"), 0o755); err != nil {
		panic(err) // the node's root is ours and exists while it runs
	}
	onTerm := "run"
	if w.ExitOnSIGTERM {
		onTerm = "exit"
	}
	dir := corev1.HostPathDirectory
	grace := w.Grace
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: w.Labels, Annotations: w.Annotations},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           WorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{
					// One record per pod, also for a controller's pods.
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "RECORD", Value: "/records/$(POD_NAMESPACE)_$(POD_NAME).log"},
					{Name: "ON_SIGTERM", Value: onTerm},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "maintenance", MountPath: "/etc/maintenance", ReadOnly: true},
					{Name: "records", MountPath: "/records"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "maintenance", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{
						Path:     "notice",
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + protocol.PodAnnotationNotice + "']"},
					}},
				}}},
				{Name: "records", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: filepath.Join(n.Root, "records"), Type: &dir,
				}}},
			},
		},
	}
}

// RecordEvent is one line of a workload's record.
type RecordEvent struct {
	Event  string // start, notice, checkpoint, sigterm
	At     time.Time
	Detail string
}

// Record reads what workload ns/name has recorded so far.
func (n *RealNode) Record(ns, name string) ([]RecordEvent, error) {
	f, err := os.Open(n.recordPath(ns, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []RecordEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 3)
		if len(parts) < 2 {
			continue // a line being written
		}
		nanos, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("record of %s/%s: %q: %w", ns, name, sc.Text(), err)
		}
		e := RecordEvent{Event: parts[0], At: time.Unix(0, nanos)}
		if len(parts) == 3 {
			e.Detail = parts[2]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// First is the first event of kind in events, and whether there is one.
func First(events []RecordEvent, kind string) (RecordEvent, bool) {
	for _, e := range events {
		if e.Event == kind {
			return e, true
		}
	}
	return RecordEvent{}, false
}

// Count is how many events of kind events hold.
func Count(events []RecordEvent, kind string) int {
	c := 0
	for _, e := range events {
		if e.Event == kind {
			c++
		}
	}
	return c
}

// WaitRecord waits until cond holds for what workload ns/name has
// recorded, and returns that record. It wakes on each write to the record
// (inotify), not on a timer; it fails t, naming what and the last record,
// after WaitTimeout.
func (n *RealNode) WaitRecord(t testing.TB, ns, name, what string, cond func([]RecordEvent) bool) []RecordEvent {
	t.Helper()
	dir := filepath.Join(n.Root, "records")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MODIFY); err != nil {
		t.Fatalf("watch %s: %v", dir, err)
	}
	deadline := time.Now().Add(WaitTimeout)
	buf := make([]byte, 64*1024)
	var last []RecordEvent
	for {
		// Read after the watch is in place: no write is missed.
		if rec, err := n.Record(ns, name); err == nil {
			last = rec
			if cond(rec) {
				return rec
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("workload %s/%s: %s; its record: %v", ns, name, what, last)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(min(left, time.Second).Milliseconds())); err != nil && err != unix.EINTR {
			t.Fatalf("poll inotify: %v", err)
		}
		for {
			if k, err := unix.Read(fd, buf); k <= 0 || err != nil {
				break // drained
			}
		}
	}
}

// ContainerProcess is a process running in one of the node's containers.
type ContainerProcess struct {
	Pid int
	// Exe is its executable as the container sees it.
	Exe string
	// UID is its real user id.
	UID int
	// ReadOnlyRoot: its root filesystem is mounted read-only.
	ReadOnlyRoot bool
}

// Processes lists the processes in the node's containers whose executable
// is exe (as the container sees it, such as /usr/local/bin/agent).
func (n *RealNode) Processes(exe string) []ContainerProcess {
	var out []ContainerProcess
	for _, pid := range cgroupPids() {
		proc := filepath.Join("/proc", strconv.Itoa(pid))
		if got, err := os.Readlink(filepath.Join(proc, "exe")); err != nil || got != exe {
			continue
		}
		p := ContainerProcess{Pid: pid, Exe: exe, UID: -1}
		if status, err := os.ReadFile(filepath.Join(proc, "status")); err == nil {
			for _, line := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, "Uid:"); ok {
					if fields := strings.Fields(v); len(fields) > 0 {
						p.UID, _ = strconv.Atoi(fields[0])
					}
				}
			}
		}
		if mounts, err := os.ReadFile(filepath.Join(proc, "mountinfo")); err == nil {
			for _, line := range strings.Split(string(mounts), "\n") {
				// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...
				if fields := strings.Fields(line); len(fields) > 5 && fields[4] == "/" {
					p.ReadOnlyRoot = strings.HasPrefix(fields[5], "ro")
				}
			}
		}
		out = append(out, p)
	}
	return out
}
