package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
)

// Workloads are told of a maintenance before SIGTERM: every pod on a node
// with a pending notice carries PodAnnotationNotice (the downward API
// exposes it as a file that the kubelet updates in place) and the pod
// condition PodConditionMaintenance (for controllers).

// Phases of a WorkloadNotice.
const (
	// NoticePending: a maintenance is scheduled; nothing stops yet.
	NoticePending = "pending"
	// NoticeStarting: the maintenance begins: the pod is evicted at its
	// EvictAt (now, or after its checkpoint lead).
	NoticeStarting = "starting"
	// NoticeOngoing: the maintenance window is open (the notice is
	// ONGOING) and the VM may stop at any moment until its end, though
	// the drain has not begun: the time to have a checkpoint.
	NoticeOngoing = "ongoing"
)

// WorkloadNotice is what a pod is told.
type WorkloadNotice struct {
	Phase string
	// WindowStart is the maintenance window's start (zero when the
	// maintenance has no window: a preemption).
	WindowStart time.Time
	// WindowEnd, while ongoing, is the window's end (zero when the
	// platform gives none).
	WindowEnd time.Time
	// EvictAt, while starting, is when the pod is evicted.
	EvictAt time.Time
}

// Encode writes n as PodAnnotationNotice's value: lines a shell can
// source (. /etc/maintenance/notice) and a program can split on "=".
func (n WorkloadNotice) Encode() string {
	lines := []string{"MAINTENANCE_PHASE=" + n.Phase}
	if !n.WindowStart.IsZero() {
		lines = append(lines, "MAINTENANCE_WINDOW_START="+strconv.FormatInt(n.WindowStart.Unix(), 10),
			"MAINTENANCE_WINDOW_START_TIME="+n.WindowStart.UTC().Format(time.RFC3339))
	}
	if !n.WindowEnd.IsZero() {
		lines = append(lines, "MAINTENANCE_WINDOW_END="+strconv.FormatInt(n.WindowEnd.Unix(), 10),
			"MAINTENANCE_WINDOW_END_TIME="+n.WindowEnd.UTC().Format(time.RFC3339))
	}
	if !n.EvictAt.IsZero() {
		lines = append(lines, "MAINTENANCE_EVICT_AT="+strconv.FormatInt(n.EvictAt.Unix(), 10),
			"MAINTENANCE_EVICT_AT_TIME="+n.EvictAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(lines, "\n") + "\n"
}

// ParseWorkloadNotice reads Encode's text.
func ParseWorkloadNotice(s string) (WorkloadNotice, error) {
	var n WorkloadNotice
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return n, fmt.Errorf("%q is not NAME=VALUE", line)
		}
		switch k {
		case "MAINTENANCE_PHASE":
			n.Phase = v
		case "MAINTENANCE_WINDOW_START_TIME":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return n, err
			}
			n.WindowStart = t
		case "MAINTENANCE_WINDOW_END_TIME":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return n, err
			}
			n.WindowEnd = t
		case "MAINTENANCE_EVICT_AT_TIME":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return n, err
			}
			n.EvictAt = t
		}
	}
	if n.Phase != NoticePending && n.Phase != NoticeOngoing && n.Phase != NoticeStarting {
		return n, fmt.Errorf("MAINTENANCE_PHASE %q: want %s, %s or %s", n.Phase, NoticePending, NoticeOngoing, NoticeStarting)
	}
	return n, nil
}

// CheckpointLead reads a pod's PodAnnotationCheckpointLead: how long
// before its eviction the pod wants to be told the maintenance begins. ok
// is false when absent; err when it is not a positive duration.
func CheckpointLead(annotations map[string]string) (lead time.Duration, ok bool, err error) {
	v, ok := annotations[PodAnnotationCheckpointLead]
	if !ok {
		return 0, false, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, true, fmt.Errorf("%s=%q: want a positive duration such as 5m", PodAnnotationCheckpointLead, maintenance.Excerpt(v))
	}
	return d, true, nil
}
