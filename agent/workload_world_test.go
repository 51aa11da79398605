package agent_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// noticeLog follows one pod's notice through a watch: every notice it
// carried, in order, and when it began to stop.
type noticeLog struct {
	mu       sync.Mutex
	notices  []string
	stopping time.Time // deletionTimestamp - grace: when it was asked to stop
}

func followNotice(t *testing.T, ns, name string) *noticeLog {
	t.Helper()
	w, err := world.Client.CoreV1().Pods(ns).Watch(testworld.Ctx(t, 5*time.Minute), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	l := &noticeLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			l.mu.Lock()
			if n := p.Annotations[protocol.PodAnnotationNotice]; len(l.notices) == 0 || l.notices[len(l.notices)-1] != n {
				l.notices = append(l.notices, n)
			}
			if p.DeletionTimestamp != nil && l.stopping.IsZero() && p.DeletionGracePeriodSeconds != nil {
				l.stopping = p.DeletionTimestamp.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return l
}

// waitNotice waits until the pod's notice satisfies ok, and returns it.
func waitNotice(t *testing.T, ns, name, what string, ok func(text string, cond *corev1.PodCondition) bool) string {
	t.Helper()
	notice := func(p *corev1.Pod) (string, *corev1.PodCondition) {
		for i, c := range p.Status.Conditions {
			if c.Type == protocol.PodConditionMaintenance {
				return p.Annotations[protocol.PodAnnotationNotice], &p.Status.Conditions[i]
			}
		}
		return p.Annotations[protocol.PodAnnotationNotice], nil
	}
	text, _ := notice(world.WaitPod(t, ns, name, what, func(p *corev1.Pod) bool { return ok(notice(p)) }))
	return text
}

// TestWorkloadsToldAheadOfSIGTERM: every pod on a node with a pending
// notice carries it (annotation and condition), updated when the window
// moves and removed when it is cancelled. When the maintenance begins, a
// pod with a checkpoint lead is told it starts, and asked to stop only
// after its lead; a pod without one at once. A lead that is not a duration
// is said (Warning Event) and ignored.
func TestWorkloadsToldAheadOfSIGTERM(t *testing.T) {
	testworld.Need(t)
	v := newVMWith(t, "agent-notice-pods-0", gceemu.Config{})
	ns := world.Namespace(t)
	trainer := makePod(ns, "trainer", v.name, 2, time.Second)
	trainer.Annotations[protocol.PodAnnotationCheckpointLead] = "4s"
	createPod(t, trainer)
	createPod(t, makePod(ns, "server", v.name, 1, time.Second))
	odd := makePod(ns, "odd", v.name, 1, time.Second)
	odd.Annotations[protocol.PodAnnotationCheckpointLead] = "soon"
	createPod(t, odd)
	startAgent(t, v, lifecycle.DefaultConfig)

	start := time.Date(2026, 12, 1, 19, 0, 1, 0, time.UTC)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(start, 2*time.Hour))
	for _, pod := range []string{"trainer", "server"} {
		text := waitNotice(t, ns, pod, "told the maintenance is pending", func(text string, cond *corev1.PodCondition) bool {
			return cond != nil && cond.Status == corev1.ConditionTrue && cond.Reason == "Pending" && cond.Message == text && text != ""
		})
		n, err := protocol.ParseWorkloadNotice(text)
		if err != nil || n.Phase != protocol.NoticePending || !n.WindowStart.Equal(start) || !contains(text, "MAINTENANCE_WINDOW_START="+strconv.FormatInt(start.Unix(), 10)) {
			t.Errorf("%s: notice %q (%v), want pending for %s", pod, text, err, start)
		}
	}
	// A lead that is not a duration: said, and the pod has none.
	world.WaitEvent(t, v.name, protocol.EventCheckpointLeadInvalid)
	later := start.Add(72 * time.Hour)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(later, 2*time.Hour))
	waitNotice(t, ns, "trainer", "told the window moved", func(text string, _ *corev1.PodCondition) bool {
		return contains(text, "MAINTENANCE_WINDOW_START_TIME="+later.Format(time.RFC3339))
	})
	v.emu.ClearNotice()
	for _, pod := range []string{"trainer", "server"} {
		waitNotice(t, ns, pod, "told the maintenance is cancelled", func(text string, cond *corev1.PodCondition) bool { return text == "" && cond == nil })
	}

	// The maintenance begins.
	trainerLog, serverLog := followNotice(t, ns, "trainer"), followNotice(t, ns, "server")
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), 2*time.Hour))
	waitNotice(t, ns, "trainer", "told again", func(text string, _ *corev1.PodCondition) bool { return text != "" })
	v.emu.SetMaintenanceEvent(string(maintenance.EventTerminate))
	for _, l := range []*noticeLog{trainerLog, serverLog} {
		err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return !l.stopping.IsZero(), nil
		})
		if err != nil {
			t.Fatal("a pod was never asked to stop")
		}
	}
	starting := func(l *noticeLog) (n protocol.WorkloadNotice, told bool, stop time.Time) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, text := range l.notices {
			if n, err := protocol.ParseWorkloadNotice(text); err == nil && n.Phase == protocol.NoticeStarting {
				return n, true, l.stopping
			}
		}
		return protocol.WorkloadNotice{}, false, l.stopping
	}
	tn, told, tStop := starting(trainerLog)
	_, serverTold, sStop := starting(serverLog)
	// Deletion timestamps are to the second.
	if !told || tStop.Before(tn.EvictAt.Add(-time.Second)) || tStop.Sub(sStop) < 3*time.Second {
		t.Errorf("trainer told it starts: %t, to stop at %s, asked at %s (server asked at %s); want told, and asked after its 4 s lead", told, tn.EvictAt, tStop, sStop)
	}
	if serverTold {
		t.Error("the server, with no lead, was told the maintenance starts: its SIGTERM says it")
	}
	t.Logf("server asked at %s; trainer told to stop at %s, asked at %s", sStop, tn.EvictAt, tStop)
}

// TestToldTheTimeTheDrainAsks: a pod with a checkpoint lead is told the
// time the drain asks it to stop, its group's deadline and the margin
// included. Under a 30 s preemption with a kube-system pod on the node
// (whose grace the drain keeps for it at the end), a trainer with a 10 s
// grace and a 5-minute lead is asked when its whole grace still fits before
// the workload group's end; it is told that time and is not asked before
// it. (Before, it was told the node's deadline minus its grace, 16 s
// later than it was asked.)
func TestToldTheTimeTheDrainAsks(t *testing.T) {
	testworld.Need(t)
	v := newVMWith(t, "agent-told-time-0", gceemu.Config{})
	ns := world.Namespace(t)
	trainer := makePod(ns, "trainer", v.name, 10, time.Second)
	trainer.Annotations[protocol.PodAnnotationCheckpointLead] = "5m"
	createPod(t, trainer)
	createPod(t, makePod("kube-system", "told-time-dns", v.name, 15, time.Second))
	world.WaitRunning(t, v.name, 2)
	startAgent(t, v, lifecycle.DefaultConfig)
	asked := world.PodSeen(t, ns, "trainer", "asked to stop", func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	v.emu.SetPreempted(true)
	told := waitNotice(t, ns, "trainer", "told the maintenance starts", func(text string, _ *corev1.PodCondition) bool {
		n, err := protocol.ParseWorkloadNotice(text)
		return err == nil && n.Phase == protocol.NoticeStarting
	})
	n, err := protocol.ParseWorkloadNotice(told)
	if err != nil {
		t.Fatal(err)
	}
	stop := asked()
	at := stop.DeletionTimestamp.Add(-time.Duration(*stop.DeletionGracePeriodSeconds) * time.Second)
	// Deletion timestamps are to the second; an eviction is never sent
	// before the time told.
	if at.Before(n.EvictAt.Add(-time.Second)) {
		t.Errorf("the trainer was told to expect its eviction at %s and was asked at %s", n.EvictAt, at)
	}
	deadline := at.Add(time.Duration(*stop.DeletionGracePeriodSeconds) * time.Second)
	t.Logf("trainer told %s, asked at %s with grace %ds (its grace ends at %s)", n.EvictAt.Format(time.RFC3339), at.Format(time.RFC3339),
		*stop.DeletionGracePeriodSeconds, deadline.Format(time.RFC3339))
}

// TestWorkloadsKeepTheNoticeWhileTheWindowIsOpen: when the notice turns
// ONGOING at the window's start, a GPU VM's drain waits for
// TERMINATE_ON_HOST_MAINTENANCE, but the VM may stop at any moment: the
// pods keep a notice, ongoing, with the window's end, until the drain.
// (Before, the notice was removed exactly then: "no maintenance".)
func TestWorkloadsKeepTheNoticeWhileTheWindowIsOpen(t *testing.T) {
	testworld.Need(t)
	v := newVMWith(t, "agent-notice-ongoing-0", gceemu.Config{})
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 2, time.Second))
	startAgent(t, v, lifecycle.DefaultConfig)
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(start, 2*time.Hour))
	waitNotice(t, ns, "trainer", "told the maintenance is pending", func(text string, _ *corev1.PodCondition) bool {
		return contains(text, "MAINTENANCE_PHASE="+protocol.NoticePending)
	})
	if !v.emu.SetNoticeStatus(gceemu.StatusOngoing) {
		t.Fatal("no notice to open")
	}
	text := waitNotice(t, ns, "trainer", "told the window is open", func(text string, cond *corev1.PodCondition) bool {
		return cond != nil && cond.Reason == "Ongoing" && cond.Message == text && contains(text, "MAINTENANCE_PHASE="+protocol.NoticeOngoing)
	})
	n, err := protocol.ParseWorkloadNotice(text)
	if err != nil || !n.WindowEnd.Equal(start.Add(2*time.Hour)) || !n.WindowStart.Equal(start) {
		t.Errorf("notice %q (%v): want ongoing from %s to %s", text, err, start, start.Add(2*time.Hour))
	}
	if p, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "trainer", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the trainer is being stopped (%v) before the stop's own signal", err)
	}
}

// TestARestartedAgentKeepsThePodsNotice: an agent replaced while a notice
// is pending (an upgrade, a crash) leaves its pods' notice as it is until
// it has read the VM's own: the new agent, whose metadata server does not
// answer at first, never takes the notice away.
func TestARestartedAgentKeepsThePodsNotice(t *testing.T) {
	testworld.Need(t)
	v := newVMWith(t, "agent-notice-restart-0", gceemu.Config{})
	ns := world.Namespace(t)
	createPod(t, makePod(ns, "trainer", v.name, 2, time.Second))
	first := startAgent(t, v, lifecycle.DefaultConfig)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), 2*time.Hour))
	waitNotice(t, ns, "trainer", "told the maintenance is pending", func(text string, _ *corev1.PodCondition) bool {
		return contains(text, "MAINTENANCE_PHASE="+protocol.NoticePending)
	})
	first.stop()
	log := followNotice(t, ns, "trainer")

	v.emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix})
	second := startAgent(t, v, lifecycle.DefaultConfig)
	if err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return v.emu.FaultsServed() >= 5, nil
	}); err != nil {
		t.Fatalf("the new agent asked the metadata server %d times", v.emu.FaultsServed())
	}
	v.emu.ClearFaults()
	if err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(second.metrics.ScheduledMaintenance) > 0, nil
	}); err != nil {
		t.Fatal("the new agent never read the notice")
	}
	waitNotice(t, ns, "trainer", "told the maintenance is pending", func(text string, _ *corev1.PodCondition) bool {
		return contains(text, "MAINTENANCE_PHASE="+protocol.NoticePending)
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	if slices.Contains(log.notices, "") {
		t.Errorf("the pod's notice went away while the agent restarted: %q", log.notices)
	}
}
