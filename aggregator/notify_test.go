package aggregator

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		" 12 ":                          12 * time.Second,
		"0":                             0,
		"-3":                            0,
		"3600":                          maxRetryAfter,
		"soon":                          0,
		"Sun, 29 Nov 2026 03:00:30 GMT": 30 * time.Second,
		"Sun, 29 Nov 2026 02:59:00 GMT": 0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: wait %s, want %s", v, got, want)
		}
	}
}

// timerClock is a fake clock that says each timer's duration once the
// timer is set, so that a Step after hearing of it fires it.
type timerClock struct {
	*testingclock.FakeClock
	timers chan time.Duration
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	timer := c.FakeClock.NewTimer(d)
	c.timers <- d
	return timer
}

// testNotifier is a notifier of a leading aggregator on clk, posting to
// url, with the nodes of a reservation sub-block grouped.
func testNotifier(t *testing.T, clk clock.Clock, url string) (*Aggregator, *notifier) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte(url), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &Aggregator{opts: Options{Clock: clk, ReservationGroups: protocol.ReservationGroupSubblock}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	a.notifier = newNotifier(a, NotifyOptions{URLFile: file, Retries: 3})
	a.leading.Store(true)
	return a, a.notifier
}

// TestNotifierWaitsAsTheReceiverAsks: a receiver that answers 429 with
// Retry-After: 7 gets the message again 7 s later, not after the
// notifier's own backoff of a second or less.
func TestNotifierWaitsAsTheReceiverAsks(t *testing.T) {
	posts := make(chan int, 2)
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		if n == 1 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		posts <- n
	}))
	t.Cleanup(srv.Close)
	clk := timerClock{testingclock.NewFakeClock(time.Now()), make(chan time.Duration, 1)}
	a, nt := testNotifier(t, clk, srv.URL)
	done := make(chan struct{})
	go func() {
		nt.post(context.Background(), fleet.Notification{Node: "n0", Step: fleet.StepBack})
		close(done)
	}()
	<-posts
	if d := <-clk.timers; d != 7*time.Second {
		t.Errorf("waited %s before the second post; want the 7s the receiver asked", d)
	}
	clk.Step(7 * time.Second)
	<-posts
	<-done
	if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepBack), "sent")); got != 1 {
		t.Errorf("sent %v; want 1", got)
	}
}

// TestNotifierForgetsTheLastTerm: a replica that leads again drops what
// its last term left queued, and forgets the group hosts it saw in
// maintenance then.
func TestNotifierForgetsTheLastTerm(t *testing.T) {
	a, nt := testNotifier(t, clock.RealClock{}, "http://127.0.0.1:1")
	nt.groups.Step(fleet.Notification{Node: "h0", Group: "b1/s1", Step: fleet.StepDraining})
	nt.enqueue(fleet.Notification{Node: "h0", Step: fleet.StepDraining}, "")
	nt.enqueue(fleet.Notification{Group: "b1/s1", Step: fleet.StepDraining}, "h0")
	a.beginLead()
	if len(nt.queue) != 0 || len(nt.groups) != 0 {
		t.Errorf("after a new term: %d queued, groups %v; want none", len(nt.queue), nt.groups)
	}
	if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepDraining), "dropped")); got != 2 {
		t.Errorf("dropped %v; want 2", got)
	}
}

// TestNotifierToldGroupBackOnDeletion: the last host in maintenance of a
// reservation sub-block is deleted: its group is told back.
func TestNotifierToldGroupBackOnDeletion(t *testing.T) {
	a, nt := testNotifier(t, clock.RealClock{}, "http://127.0.0.1:1")
	host := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			a.opts.PoolLabel: "a3", protocol.LabelTopologyBlock: "b1", protocol.LabelTopologySubblock: "s1"}}}
	}
	group := a.opts.grouping().Name(host("h0"))
	if group == "" {
		t.Fatal("the hosts form no group")
	}
	for _, h := range []string{"h0", "h1"} {
		nt.groups.Step(fleet.Notification{Node: h, Group: group, Step: fleet.StepDraining})
	}
	a.notifyDeleted(host("h0"))
	if len(nt.queue) != 0 {
		t.Fatalf("one of two hosts deleted: %d told; want none", len(nt.queue))
	}
	a.notifyDeleted(host("h1"))
	if len(nt.queue) != 1 {
		t.Fatalf("the last host deleted: %d told; want the group back", len(nt.queue))
	}
	if x := <-nt.queue; x.Group != group || x.Step != fleet.StepBack || x.Pool != "a3" {
		t.Errorf("told %+v; want group %s back", x, group)
	}
}

// TestNotifierFollowsNoRedirect: a webhook that answers with a redirect
// gets nothing more; the message failed.
func TestNotifierFollowsNoRedirect(t *testing.T) {
	elsewhere := make(chan struct{}, 1)
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere <- struct{}{} }))
	t.Cleanup(target.Close)
	hook := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	t.Cleanup(hook.Close)
	a, nt := testNotifier(t, clock.RealClock{}, hook.URL)
	nt.post(context.Background(), fleet.Notification{Node: "n0", Step: fleet.StepBack})
	if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepBack), "failed")); got != 1 {
		t.Errorf("failed %v; want the redirect a final failure", got)
	}
	select {
	case <-elsewhere:
		t.Error("the redirect was followed")
	default:
	}
}

// TestNotifierRateLimitsANode: one node is told notifyPerHour messages
// an hour, its group as many besides; the rest are counted, and an hour
// later it is told again.
func TestNotifierRateLimitsANode(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	a, nt := testNotifier(t, clk, "http://127.0.0.1:1")
	for range notifyPerHour + 3 {
		nt.enqueue(fleet.Notification{Node: "flappy", Step: fleet.StepDraining}, "")
	}
	nt.enqueue(fleet.Notification{Group: "b1/s1", Step: fleet.StepDraining}, "h0")
	if len(nt.queue) != notifyPerHour+1 {
		t.Errorf("%d queued; want %d of the node and the group's one", len(nt.queue), notifyPerHour+1)
	}
	if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepDraining), "rate_limited")); got != 3 {
		t.Errorf("rate_limited %v; want 3", got)
	}
	clk.Step(time.Hour)
	nt.enqueue(fleet.Notification{Node: "flappy", Step: fleet.StepBack}, "")
	if len(nt.queue) != notifyPerHour+2 {
		t.Errorf("an hour later: %d queued; want the node told again", len(nt.queue))
	}
}

// TestNotifierGroupSharesPerHost: a group's messages are counted by the
// host whose step told them: a host that flaps, or whose agent lies, and
// tells its group notifyPerHour messages and more, leaves the group's
// message of another host's maintenance to be told.
func TestNotifierGroupSharesPerHost(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	a, nt := testNotifier(t, clk, "http://127.0.0.1:1")
	for range notifyPerHour + 3 {
		nt.enqueue(fleet.Notification{Group: "b1/s1", Step: fleet.StepDraining}, "flappy")
	}
	if got := testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepDraining), "rate_limited")); got != 3 {
		t.Errorf("rate_limited %v; want the flapping host's 3 past its share", got)
	}
	nt.enqueue(fleet.Notification{Group: "b1/s1", Step: fleet.StepDraining}, "honest")
	if len(nt.queue) != notifyPerHour+1 {
		t.Errorf("%d queued; want the flapping host's %d and the other host's one", len(nt.queue), notifyPerHour)
	}
}

// TestSlackMessagesAreText: what a node wrote into a message reaches
// Slack escaped: no mention, no link.
func TestSlackMessagesAreText(t *testing.T) {
	_, nt := testNotifier(t, clock.RealClock{}, "http://127.0.0.1:1")
	nt.opts.Format = NotifySlack
	var got struct{ Text string }
	body, _, err := nt.body(fleet.Notification{Node: "n0", Step: fleet.StepDraining, Message: "<!channel> see <https://evil.example|the runbook> & go"})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(got.Text, "<>") || !strings.Contains(got.Text, "&lt;!channel&gt; see &lt;https://evil.example|the runbook&gt; &amp; go") {
		t.Errorf("text %q; want the markup escaped", got.Text)
	}
}
