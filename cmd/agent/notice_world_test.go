package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// TestNoticeExamplesRunAsWritten runs the README's examples, the Go and
// the Python one, unchanged, against the agent binary's notice endpoint,
// reached through MAINTENANCE_NOTICE_URL: each hears the notice that was
// pending before it started (it reads first), then its change to ONGOING,
// then its end.
func TestNoticeExamplesRunAsWritten(t *testing.T) {
	testworld.Need(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("the Python example needs python3 on the PATH")
	}
	goExample := filepath.Join(t.TempDir(), "notice")
	if out, err := exec.Command("go", "build", "-o", goExample, "../../examples/notice").CombinedOutput(); err != nil {
		t.Fatalf("build the Go example: %v\n%s", err, out)
	}
	emu, notice, heard := servingNotice(t, "agent-notice-examples", 5*time.Second)
	ctx := testworld.Ctx(t, 2*time.Minute)
	upcoming := heard(ctx, metadata.KeyUpcomingMaintenance)
	start := time.Now().Add(time.Hour).Truncate(time.Second)
	emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
	awaitAnswer(t, ctx, upcoming, "the notice", func(a metadata.Answer) bool { return strings.Contains(a.Value, string(maintenance.StatusPending)) })

	examples := map[string]<-chan string{
		"go":     runExample(t, notice, goExample),
		"python": runExample(t, notice, python, "../../examples/notice/notice.py"),
	}
	next := func(name string, lines <-chan string) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-ctx.Done():
			t.Fatalf("the %s example printed nothing more", name)
			return ""
		}
	}
	for name, lines := range examples {
		if l := next(name, lines); !strings.HasPrefix(l, "notice: {") || !strings.Contains(l, string(maintenance.StatusPending)) {
			t.Errorf("the %s example's first line %q, want the notice pending before it started", name, l)
		}
	}
	emu.SetNoticeStatus(gceemu.StatusOngoing)
	for name, lines := range examples {
		if l := next(name, lines); !strings.Contains(l, string(maintenance.StatusOngoing)) {
			t.Errorf("the %s example's next line %q, want the notice ONGOING", name, l)
		}
	}
	emu.ClearNotice()
	for name, lines := range examples {
		if l := next(name, lines); !strings.HasPrefix(l, "notice: ") || strings.Contains(l, string(maintenance.StatusOngoing)) {
			t.Errorf("the %s example's next line %q, want the notice gone", name, l)
		}
	}
}

// runExample runs an example with MAINTENANCE_NOTICE_URL set to the
// endpoint at addr, and hands on each line it prints; it is killed at the
// test's end.
func runExample(t *testing.T, addr string, name string, args ...string) <-chan string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "MAINTENANCE_NOTICE_URL=http://"+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s printed on stderr:\n%s", name, stderr.String())
		}
	})
	return lines
}

// TestNoticeEndpointOutlivesAPortClash: another program holds the notice
// endpoint's port when the agent starts. The agent runs on (a Warning
// Event, the serving gauge at 0, a detail on a /healthz that still answers
// ok), and serves once the port is free. There, one client address
// holding its share of connections is refused one more (429, counted),
// while another client is served; an address that is neither the node's
// nor in its pod range is answered 403.
func TestNoticeEndpointOutlivesAPortClash(t *testing.T) {
	testworld.Need(t)
	const node = "agent-notice-clash"
	emu := setup(t, node)
	// The node's pods: 127.0.0.0/30 (the endpoint serves them and the
	// node's own addresses).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "127.0.0.0/30", []string{"127.0.0.0/30"}
		_, err = world.Client.CoreV1().Nodes().Update(testworld.Ctx(t, 10*time.Second), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := testworld.FreeAddrT(t)
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	p := runAgent(t, node, emu, "--notice-listen-address", addr)
	world.WaitEvent(t, node, protocol.EventNoticeEndpointUnavailable, addr)
	code, body := p.get("/healthz")
	if code != http.StatusOK || !strings.Contains(body, "notice endpoint unhealthy") || !strings.Contains(body, "address already in use") {
		t.Errorf("/healthz with the port held: %d %q, want ok with the endpoint's detail", code, body)
	}
	_, text := p.get("/metrics")
	if got := metricValue(t, text, "maintenance_handler_agent_notice_endpoint_serving", nil); got != 0 {
		t.Errorf("notice_endpoint_serving %v with the port held, want 0", got)
	}

	squatter.Close()
	world.WaitEvent(t, node, protocol.EventNoticeEndpointServing, addr)
	select {
	case <-p.exited:
		t.Fatalf("the agent exited: %v", p.err)
	default:
	}
	if code, body := p.get("/healthz"); code != http.StatusOK || strings.Contains(body, "notice") {
		t.Errorf("/healthz once serving: %d %q, want ok alone", code, body)
	}

	// One client (127.0.0.3: not the address that read the ETag, whose
	// last connection the endpoint may not have let go of yet) holds its
	// share with long polls; the listener accepts in the order the
	// connections came, so the next one is over the bound.
	url := metadata.MirrorPrefix + metadata.KeyUpcomingMaintenance
	etag := waitForETag(t, addr, url)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	holder := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 10 * time.Second}
	for range noticePerClient {
		c, err := holder.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "GET %s?wait_for_change=true&timeout_sec=120&last_etag=%s HTTP/1.1\r\nHost: notice\r\nMetadata-Flavor: Google\r\n\r\n", url, etag)
	}
	if status, body := rawGet(t, "127.0.0.3", addr, url); status != http.StatusTooManyRequests || !strings.Contains(body, fmt.Sprint(noticePerClient)) {
		t.Errorf("one connection over the client's share: %d %q, want 429 naming the bound", status, body)
	}
	if status, body := rawGet(t, "127.0.0.2", addr, url); status == http.StatusTooManyRequests || status == 0 {
		t.Errorf("another client while the first holds its share: %d %q, want it served", status, body)
	}
	if status, body := rawGet(t, "127.0.0.5", addr, url); status != http.StatusForbidden {
		t.Errorf("a client outside the node's pod range: %d %q, want 403", status, body)
	}
	_, text = p.get("/metrics")
	for reason, want := range map[string]float64{"over_share": 1, "foreign": 1} {
		if got := metricValue(t, text, "maintenance_handler_agent_notice_endpoint_refused_total", map[string]string{"reason": reason}); got != want {
			t.Errorf("notice_endpoint_refused_total{reason=%q} %v, want %v", reason, got, want)
		}
	}
	if got := metricValue(t, text, "maintenance_handler_agent_notice_endpoint_serving", nil); got != 1 {
		t.Errorf("notice_endpoint_serving %v once serving, want 1", got)
	}
}

// waitForETag reads path on the endpoint until the agent has read it (a
// 503 without ETag means not yet), and returns its ETag.
func waitForETag(t *testing.T, addr, path string) string {
	t.Helper()
	var etag string
	poll(t, "the endpoint serves what the agent read", 30*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		etag = resp.Header.Get("ETag")
		return etag != ""
	})
	return etag
}

// rawGet makes one request to addr on a new connection from source, and
// returns the status and body (0 when no answer came).
func rawGet(t *testing.T, source, addr, path string) (int, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
