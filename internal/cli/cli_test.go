package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// TestServeBoundedHoldsEachClientToItsShare: one client address holding
// its share of connections is answered 429 for one more, and the others
// are still served; a connection it closes gives its place back.
func TestServeBoundedHoldsEachClientToItsShare(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan string, 8), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.RemoteAddr
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "ok")
	})
	var refused atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ServeBounded(ctx, ln, h, Bounds{Conns: 8, PerSource: 2, Refused: func(reason string) {
		if reason == RefusedOverShare {
			refused.Add(1)
		}
	}})
	url := "http://" + ln.Addr().String() + "/"

	// client is an HTTP client whose every request is a new connection
	// from source.
	client := func(source string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	type answer struct {
		status int
		body   string
		err    error
	}
	get := func(c *http.Client) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := c.Get(url)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- answer{status: resp.StatusCode, body: string(b)}
		}()
		return ch
	}
	hog := client("127.0.0.1")
	held := []<-chan answer{get(hog), get(hog)}
	for range held {
		<-arrived
	}
	if a := <-get(hog); a.err != nil || a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "at most 2") {
		t.Errorf("a third connection from the same address: %+v, want 429 saying the bound", a)
	}
	other := get(client("127.0.0.2"))
	select {
	case from := <-arrived:
		if !strings.HasPrefix(from, "127.0.0.2:") {
			t.Errorf("served %s, want the other client", from)
		}
	case a := <-other:
		t.Errorf("another client, while the first holds its share: %+v, want it served", a)
	}
	close(release)
	for _, ch := range append(held, other) {
		if a := <-ch; a.err != nil || a.status != http.StatusOK {
			t.Errorf("a held request: %+v, want 200", a)
		}
	}
	if got := refused.Load(); got != 1 {
		t.Errorf("refused %d connections, want 1", got)
	}
}

// TestPerSourceGivesThePlaceBack: a connection closed by the server gives
// its address's place back.
func TestPerSourceGivesThePlaceBack(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	var refused atomic.Int32
	l := newLimited(inner, Bounds{Conns: 1, PerSource: 1, Refused: func(string) { refused.Add(1) }}, true)
	for i := range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if refused.Load() != 0 || len(l.open) != 0 || l.shared != 0 {
		t.Errorf("refused %d, open %v, shared %d: want every connection accepted in turn, none left open", refused.Load(), l.open, l.shared)
	}
}

// TestServeBoundedServesOnlyWhomItAllows: a client address Allow refuses
// is answered 403, counted, and takes no place; an allowed one is served.
func TestServeBoundedServesOnlyWhomItAllows(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var foreign atomic.Int32
	ServeBounded(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		Bounds{Conns: 1, PerSource: 1, Allow: func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }, Refused: func(reason string) {
			if reason == RefusedForeign {
				foreign.Add(1)
			}
		}})
	get := func(source string) (int, string) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get("127.0.0.2"); status != http.StatusForbidden || !strings.Contains(body, "only its node") {
		t.Errorf("a client not allowed: %d %q, want 403 saying whom it serves", status, body)
	}
	if status, body := get("127.0.0.1"); status != http.StatusOK {
		t.Errorf("an allowed client, after a refused one (which took no place of the one there is): %d %q, want 200", status, body)
	}
	if got := foreign.Load(); got != 1 {
		t.Errorf("counted %d refused clients, want 1", got)
	}
}

// TestServeClosesIdleConnections: a client that sends one request and
// then holds its connection open, as any pod on the node may, has it
// closed by the server once idle; one that sends no request at all too.
func TestServeClosesIdleConnections(t *testing.T) {
	idle, header := serveIdle, serveHeader
	serveIdle, serveHeader = 100*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { serveIdle, serveHeader = idle, header })
	ctx, cancel := context.WithCancel(context.Background())
	g, ctx := errgroup.WithContext(ctx)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	addr, err := Serve(ctx, g, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, request := range []bool{true, false} {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		if request {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		// The server closes it: the read ends. The deadline only keeps a
		// failing test from hanging.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("request sent %t: the idle connection was not closed by the server: %v", request, err)
		}
		c.Close()
	}
}
