package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetadataFaultsCauseNoDrain(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-faults-0")
	for _, key := range []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance} {
		v.emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + key, Kind: gceemu.FaultStatus, Status: 503})
	}
	began := time.Now()
	r := startAgent(t, v, lifecycle.DefaultConfig)
	keys := []string{metadata.KeyMaintenanceEvent, metadata.KeyPreempted, metadata.KeyUpcomingMaintenance}
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(r.metrics.MetadataRequests.WithLabelValues(metadata.KeyMaintenanceEvent, metadata.ResultServerError)) >= 2, nil
	})
	if err != nil {
		t.Fatal("no failed metadata requests counted")
	}
	if err := r.watcher.Healthy(keys, began, 0); err == nil {
		t.Error("healthy while every metadata request fails")
	}
	// Garbage and an unknown value: counted, a Warning, and no drain.
	v.emu.ClearFaults()
	v.emu.InjectFault(gceemu.Fault{Path: gceemu.MetadataPrefix + metadata.KeyMaintenanceEvent, Kind: gceemu.FaultGarbage, Times: 2})
	v.emu.SetMaintenanceEvent("TERMINATE_SOMETIME")
	world.WaitEvent(t, v.name, protocol.EventUnrecognizedValue)
	if n := getNode(t, v.name); protocol.HasTaint(n) || n.Spec.Unschedulable || n.Labels[protocol.LabelActiveMaintenance] != "" {
		t.Fatal("an unknown value or a fault drained the node")
	}
	if got := testworld.Settled(t, r.metrics.UnrecognizedValues.WithLabelValues(metadata.KeyMaintenanceEvent), 1); got < 1 {
		t.Errorf("unrecognized values counted: %v", got)
	}
	v.emu.SetMaintenanceEvent(gceemu.EventNone)
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.watcher.Healthy(keys, began, time.Hour) == nil && !r.watcher.LastGood(metadata.KeyMaintenanceEvent).IsZero(), nil
	})
	if err != nil {
		t.Errorf("never healthy again after the faults: %v", r.watcher.Healthy(keys, began, time.Hour))
	}
	if n := getNode(t, v.name); protocol.HasTaint(n) {
		t.Error("tainted after recovery with nothing scheduled")
	}
}

// requestLog counts API requests by method and path, marking watches.
type requestLog struct {
	mu   sync.Mutex
	seen []string
	next http.RoundTripper
}

func (l *requestLog) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := req.Method + " " + req.URL.Path
	if req.URL.Query().Get("watch") == "true" {
		kind = "WATCH " + req.URL.Path
	}
	l.mu.Lock()
	l.seen = append(l.seen, kind)
	l.mu.Unlock()
	return l.next.RoundTrip(req)
}

func (l *requestLog) since(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen[i:]...)
}

func (l *requestLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// TestIdleAgentOnlyWatches: with a notice pending and nothing happening, the
// agent makes no API requests at all; what it knows comes from three
// watches (its Node, its Node's pods, its Node's ResourceSlices).
func TestIdleAgentOnlyWatches(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-idle-0")
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 24, 3, 0, 0, 0, time.UTC), 4*time.Hour))
	log := &requestLog{}
	cfg := rest.CopyConfig(world.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
	startAgentWith(t, v, lifecycle.DefaultConfig, cfg)
	world.WaitNode(t, v.name, "scheduled label", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	world.WaitEvent(t, v.name, protocol.EventMaintenanceScheduled)
	var watches []string
	for _, r := range log.since(0) {
		if strings.HasPrefix(r, "WATCH ") {
			watches = append(watches, r)
		}
	}
	slices.Sort(watches)
	if want := []string{"WATCH /api/v1/nodes", "WATCH /api/v1/pods", "WATCH /apis/resource.k8s.io/v1/resourceslices"}; !slices.Equal(watches, want) {
		t.Errorf("watches %v, want three: the node, its pods and its ResourceSlices", watches)
	}
	mark := log.len()
	// A window in which nothing happens but the metadata long polls: two
	// more answers for each of the three keys (two poll timeouts).
	served := v.emu.Requests()
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, time.Minute), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return v.emu.Requests() >= served+6, nil
	})
	if err != nil {
		t.Fatalf("the agent stopped polling the metadata server (%d requests)", v.emu.Requests())
	}
	if extra := log.since(mark); len(extra) > 0 {
		t.Errorf("idle agent made API requests: %v", extra)
	}
}

// failingNodeUpdates answers 500 to every update of one Node while on.
type failingNodeUpdates struct {
	next http.RoundTripper
	path string
	mu   sync.Mutex
	on   bool
	hits int
}

func (f *failingNodeUpdates) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	fail := f.on && req.Method == http.MethodPut && req.URL.Path == f.path
	if fail {
		f.hits++
	}
	f.mu.Unlock()
	if fail {
		return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is down","code":500}`)), Request: req}, nil
	}
	return f.next.RoundTrip(req)
}

func (f *failingNodeUpdates) set(on bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
	return f.hits
}

// TestAPIServerFailuresMakeTheAgentUnhealthyNotDead: while every update of
// its Node fails, the agent keeps running, backs off, and reports itself
// unhealthy; once updates work again it catches up and is healthy.
func TestAPIServerFailuresMakeTheAgentUnhealthyNotDead(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-apifail-0")
	fail := &failingNodeUpdates{path: "/api/v1/nodes/" + v.name}
	cfg := rest.CopyConfig(world.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { fail.next = rt; return fail })
	r := startAgentWith(t, v, lifecycle.DefaultConfig, cfg)
	fail.set(true)
	start := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	v.emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return r.agent.Healthy(0) != nil, nil
	})
	if err != nil {
		t.Fatal("never unhealthy while every node update failed")
	}
	if err := r.agent.Healthy(time.Hour); err != nil {
		t.Errorf("unhealthy before the limit: %v", err)
	}
	if hits := fail.set(false); hits < 1 {
		t.Fatalf("no update was attempted (%d)", hits)
	}
	world.WaitNode(t, v.name, "label after recovery", func(n *corev1.Node) bool {
		return n.Labels[protocol.LabelScheduledMaintenanceTime] == strconv.FormatInt(start.Unix(), 10)
	})
	// The Node shows the write before the agent's call has returned: its
	// health turns with the answer.
	var last error
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = r.agent.Healthy(0)
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("still unhealthy after recovery: %v", last)
	}
}

// TestLifecycleEventsSurviveAWarningBurst: after a burst of warnings on the
// Node (client-go's recorder would drop everything past 25 from one source
// about one object), a lifecycle Event is still recorded.
func TestLifecycleEventsSurviveAWarningBurst(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-events-0")
	node := getNode(t, v.name)
	events := kube.NewNodeEvents(kubeClient(t, world.Config).EventSink(), protocol.EventSourceAgent, v.name, node.UID)
	defer events.Shutdown()
	for i := range 40 {
		events.NodeEvent(true, protocol.EventUnrecognizedValue, fmt.Sprintf("odd value number %d", i))
	}
	events.NodeEvent(true, protocol.EventTerminateOnHost, "Host maintenance will stop the VM; draining")
	world.WaitEvent(t, v.name, protocol.EventTerminateOnHost)
}

// TestUnrecognizedValuesWarnOncePerChange: a run of values the agent does
// not recognise is one Warning Event (each is logged and counted); a
// recognised value in between makes the next odd one warn again.
func TestUnrecognizedValuesWarnOncePerChange(t *testing.T) {
	testworld.Need(t)
	v := newVM(t, "agent-events-1")
	r := startAgent(t, v, lifecycle.DefaultConfig)
	counted := func() float64 {
		return testutil.ToFloat64(r.metrics.UnrecognizedValues.WithLabelValues(metadata.KeyMaintenanceEvent))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("%s never happened", what)
		}
	}
	for i := range 10 {
		v.emu.SetMaintenanceEvent(fmt.Sprintf("REBOOT_MAYBE_%d", i))
		waitFor(fmt.Sprintf("odd value %d counted", i), func() bool { return counted() >= float64(i+1) })
	}
	// A lifecycle Event after the run: the Events before it are written.
	v.emu.SetMaintenanceEvent(gceemu.EventMigrate)
	world.WaitEvent(t, v.name, protocol.EventMigrateOnHost)
	if got := nodeEvents(t, v.name)[protocol.EventUnrecognizedValue]; got != 1 {
		t.Errorf("%d %s Events for a run of 10 odd values, want 1", got, protocol.EventUnrecognizedValue)
	}
	v.emu.SetMaintenanceEvent("REBOOT_MAYBE_AGAIN")
	waitFor("the next odd value counted", func() bool { return counted() >= 11 })
	v.emu.SetMaintenanceEvent(gceemu.EventNone)
	v.emu.SetPreempted(true)
	world.WaitEvent(t, v.name, protocol.EventPreempted)
	if got := nodeEvents(t, v.name)[protocol.EventUnrecognizedValue]; got != 2 {
		t.Errorf("%d %s Events after a recognised value and another odd one, want 2", got, protocol.EventUnrecognizedValue)
	}
}
