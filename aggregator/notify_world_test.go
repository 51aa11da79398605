package aggregator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	"github.com/maintenance-handler/maintenance-handler/test/vms"
)

// receiver is a webhook that refuses its first refuse posts (503), then
// keeps what it is sent.
type receiver struct {
	mu       sync.Mutex
	refuse   int
	refused  int
	received []fleet.Notification
	cluster  []string
	// got is signalled after each message kept.
	got chan struct{}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused < r.refuse {
		r.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var got struct {
		Cluster string `json:"cluster"`
		fleet.Notification
	}
	if json.Unmarshal(body, &got) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.received = append(r.received, got.Notification)
	r.cluster = append(r.cluster, got.Cluster)
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// of is what r kept about node.
func (r *receiver) of(node string) []fleet.Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []fleet.Notification
	for _, n := range r.received {
		if n.Node == node {
			out = append(out, n)
		}
	}
	return out
}

// notifiedWorld starts a real agent on node pool-0 of pool (a new node of
// this world) and the aggregator binary, leading, whose webhook is url,
// its URL in a file as a mounted Secret holds it, with the cluster named
// test-world and args added; it returns the fleet, the node's VM and the
// aggregator's metrics address.
func notifiedWorld(t *testing.T, ctx context.Context, pool, url string, args ...string) (*procs, *vms.VM, string) {
	t.Helper()
	urlFile := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(urlFile, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProcs(t)
	node := pool + "-0"
	v, err := p.f.Add(ctx, testworld.NodeSpec{Name: node, Pool: pool}, gceemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, node, "seen by its agent", func(n *corev1.Node) bool { return n.Annotations[protocol.AnnotationLastBootID] != "" })
	metricsAddr := testworld.FreeAddrT(t)
	agg, err := world.StartProcess("aggregator-"+pool, filepath.Join(p.bins, "aggregator"), append([]string{"--kubeconfig", world.AggregatorKubeconfigT(t, p.ns), "--namespace", p.ns,
		"--identity", "agg-" + pool, "--interval", "1s", "--listen-address", metricsAddr, "--log-level", "warn", "--cluster-name", "test-world",
		"--notify-url-file", urlFile}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agg.Kill() })
	waitMetric(t, ctx, metricsAddr, "maintenance_handler_aggregator_leader", 1)
	return p, v, metricsAddr
}

// TestNotifierTellsEachStepOnce: a real agent and a real aggregator whose
// webhook is a local receiver, its URL in a file as a mounted Secret
// holds it, with no digest. A node goes through a host maintenance: the
// receiver gets one message per step, in order, once (scheduled,
// draining, in-maintenance, back), the first after two refusals it
// retried through.
func TestNotifierTellsEachStepOnce(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 4*time.Minute)
	recv := &receiver{refuse: 2, got: make(chan struct{}, 1)}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	p, v, metricsAddr := notifiedWorld(t, ctx, "told", srv.URL+"/hooks/maintenance", "--notify-format", "json", "--notify-digest", "0")
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(48*time.Hour), 4*time.Hour))
	world.WaitNode(t, "told-0", "its notice mirrored", func(n *corev1.Node) bool { return n.Labels[protocol.LabelScheduledMaintenanceTime] != "" })
	v.Emu.SetMaintenanceEvent(gceemu.EventTerminate)
	world.WaitNode(t, "told-0", "drained", func(n *corev1.Node) bool { return protocol.ReadAgentState(n).Phase == protocol.PhaseTerminating })
	if err := p.f.Reboot(ctx, v); err != nil {
		t.Fatal(err)
	}
	world.WaitNode(t, "told-0", "back", func(n *corev1.Node) bool {
		return protocol.ReadAgentState(n).Phase == protocol.PhaseIdle && !protocol.HasTaint(n)
	})

	want := []fleet.Step{fleet.StepScheduled, fleet.StepDraining, fleet.StepInMaintenance, fleet.StepBack}
	for len(recv.of("told-0")) < len(want) {
		select {
		case <-recv.got:
		case <-ctx.Done():
			t.Fatalf("told %+v; want %v", recv.of("told-0"), want)
		}
	}
	// Every message posted has been received (the count of those sent is
	// the receiver's, whatever other nodes of the world did): none more
	// is on its way.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		return metricSumQuiet(metricsAddr, `maintenance_handler_aggregator_notifications_total{outcome="sent",step="back"}`) >= 1 &&
			metricTotal(t, metricsAddr, "maintenance_handler_aggregator_notifications_total") == float64(len(recv.received)), nil
	})
	if err != nil {
		t.Fatalf("the notifier's count never met the receiver's: %v", err)
	}
	mine := recv.of("told-0")
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(mine) != len(want) {
		t.Fatalf("told %+v; want %v, once each", mine, want)
	}
	for i, n := range mine {
		if n.Step != want[i] || n.Pool != "told" || n.Message == "" {
			t.Errorf("message %d: %+v; want step %s of pool told", i, n, want[i])
		}
	}
	if mine[1].Reason != string(protocol.ReasonHostMaintenance) {
		t.Errorf("draining for %q; want %s", mine[1].Reason, protocol.ReasonHostMaintenance)
	}
	if recv.refused != 2 || recv.cluster[0] != "test-world" {
		t.Errorf("refused %d, cluster %q; want the first message retried through two refusals, naming the cluster", recv.refused, recv.cluster[0])
	}
}

// chatReceiver is a Google Chat-style webhook: it takes a JSON object
// with a text, from a caller that presents the key it expects, and keeps
// the texts; anything else is refused (400 or 401).
type chatReceiver struct {
	mu    sync.Mutex
	texts []string
	got   chan struct{}
}

func (r *chatReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var msg struct {
		Text string `json:"text"`
	}
	if req.Header.Get("Authorization") != "Bearer chat-key" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if req.Header.Get("Content-Type") != "application/json" || json.NewDecoder(req.Body).Decode(&msg) != nil || msg.Text == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.texts = append(r.texts, msg.Text)
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// TestNotifierTemplateReachesAChatReceiver: the aggregator binary with
// the Google Chat example template (examples/notifications) and a headers
// file tells a node's scheduled maintenance to a Chat-style receiver, as
// the text Chat shows, with the key the receiver asks for: with the
// default digest, the window that held this one step alone posts it as
// the step.
func TestNotifierTemplateReachesAChatReceiver(t *testing.T) {
	testworld.Need(t)
	ctx := testworld.Ctx(t, 3*time.Minute)
	recv := &chatReceiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	headersFile := filepath.Join(t.TempDir(), "headers")
	if err := os.WriteFile(headersFile, []byte("Authorization: Bearer chat-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmpl, err := filepath.Abs(filepath.Join("..", "examples", "notifications", "google-chat.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	_, v, _ := notifiedWorld(t, ctx, "chat", srv.URL+"/v1/spaces/S/messages", "--notify-headers-file", headersFile, "--notify-format", "template", "--notify-template-file", tmpl)
	v.Emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(48*time.Hour), 4*time.Hour))
	want := "*scheduled* chat-0 (pool chat, cluster test-world): Compute Engine scheduled a maintenance of chat-0"
	for {
		recv.mu.Lock()
		found := slices.ContainsFunc(recv.texts, func(s string) bool { return strings.HasPrefix(s, want) })
		texts := slices.Clone(recv.texts)
		recv.mu.Unlock()
		if found {
			break
		}
		select {
		case <-recv.got:
		case <-ctx.Done():
			t.Fatalf("the receiver kept %q; want a text beginning %q", texts, want)
		}
	}
}
