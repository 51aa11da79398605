package metadata

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/backoff"
)

// TestMirrorServesWhatTheWatcherRead: the agent's own watcher, through the
// official client, long-polls a Mirror as it long-polls the metadata
// server, and hears each answer the Mirror is given, every "no notice"
// form included, as it was given.
func TestMirrorServesWhatTheWatcherRead(t *testing.T) {
	m := NewMirror(KeyMaintenanceEvent, KeyPreempted, KeyUpcomingMaintenance)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	w := NewWatcher(WatcherOptions{Client: NewClient(5*time.Second, strings.TrimPrefix(srv.URL, "http://")), Timeout: 5 * time.Second,
		Backoff: backoff.Policy{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan Answer, 16)
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(ctx, KeyUpcomingMaintenance, func(_ context.Context, a Answer) bool { got <- a; return true })
	}()
	notice := `{"can_reschedule":true,"maintenance_status":"PENDING","type":"SCHEDULED","window_start_time":"2026-12-01T19:00:00Z"}`
	for _, a := range []Answer{
		{Value: "{}"},                 // nothing scheduled, as an empty object
		{Value: notice},               // a notice
		{Absent: true},                // 404
		{Absent: true, NotYet: true},  // 503, no notifications yet
		{Value: "NONE"},               // nothing scheduled, as NONE
		{Value: strings.ToUpper("x")}, // whatever the server said
	} {
		m.Set(KeyUpcomingMaintenance, a)
		select {
		case heard := <-got:
			// The watcher reads the notice with alt=json: a plain value
			// comes as a JSON string, as from the metadata server.
			want := a.Value
			if want == "NONE" || want == "X" {
				want = `"` + want + `"`
			}
			if heard.Value != want || heard.Absent != a.Absent || heard.NotYet != a.NotYet {
				t.Errorf("set %+v, the watcher heard %+v", a, heard)
			}
		case err := <-done:
			t.Fatalf("the watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("set %+v, the watcher heard nothing", a)
		}
	}
}

// TestMirrorAnswersOnlyWhatItServes: anything but a GET of a key it serves
// with the Metadata-Flavor header gets a clear 4xx; a key not read yet is
// 503; a long poll on an unchanged value answers at its timeout, and one
// on a stale ETag at once.
func TestMirrorAnswersOnlyWhatItServes(t *testing.T) {
	m := NewMirror(KeyMaintenanceEvent, KeyPreempted)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	do := func(method, path string, header bool) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if header {
			req.Header.Set("Metadata-Flavor", "Google")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Metadata-Flavor") != "Google" {
			t.Errorf("%s %s: no Metadata-Flavor header on the answer", method, path)
		}
		return resp.StatusCode, string(body), resp.Header.Get("ETag")
	}
	const event = MirrorPrefix + KeyMaintenanceEvent
	if code, body, _ := do("GET", event, true); code != http.StatusServiceUnavailable || !strings.Contains(body, "not read this key") {
		t.Errorf("a key not read yet: %d %q", code, body)
	}
	m.Set(KeyMaintenanceEvent, Answer{Value: "NONE"})
	code, body, tag := do("GET", event, true)
	if code != http.StatusOK || body != "NONE" || len(tag) != 16 {
		t.Errorf("the value: %d %q etag %q", code, body, tag)
	}
	if code, body, _ := do("GET", event+"?alt=json", true); code != http.StatusOK || body != `"NONE"` {
		t.Errorf("alt=json: %d %q", code, body)
	}
	// A value read with alt=json is served as it came with alt=json, and
	// as its text without.
	m.Set(KeyPreempted, Answer{Value: `"FALSE"`})
	if _, body, _ := do("GET", MirrorPrefix+KeyPreempted+"?alt=json", true); body != `"FALSE"` {
		t.Errorf("alt=json of a JSON string: %q", body)
	}
	if _, body, _ := do("GET", MirrorPrefix+KeyPreempted, true); body != "FALSE" {
		t.Errorf("the text of a JSON string: %q", body)
	}
	for _, tc := range []struct {
		method, path string
		header       bool
		want         int
	}{
		{"GET", event, false, http.StatusForbidden},
		{"POST", event, true, http.StatusMethodNotAllowed},
		{"GET", event + "?timeout_sec=soon", true, http.StatusBadRequest},
		{"GET", event + "?wait_for_change=maybe", true, http.StatusBadRequest},
		{"GET", event + "?recursive=true", true, http.StatusBadRequest},
		{"GET", MirrorPrefix + "instance/service-accounts/default/token", true, http.StatusNotFound},
		{"GET", MirrorPrefix + "project/project-id", true, http.StatusNotFound},
		{"GET", MirrorPrefix + "instance/attributes/other", true, http.StatusNotFound},
		{"GET", MirrorPrefix + KeyUpcomingMaintenance, true, http.StatusNotFound}, // not served by this one
		{"GET", "/" + KeyMaintenanceEvent, true, http.StatusNotFound},
		{"GET", MirrorPrefix + KeyDeadline, true, http.StatusNotFound}, // no maintenance under way
	} {
		if code, body, _ := do(tc.method, tc.path, tc.header); code != tc.want || body == "" {
			t.Errorf("%s %s (header %t): %d %q, want %d and a reason", tc.method, tc.path, tc.header, code, body, tc.want)
		}
	}
	m.SetDeadline(time.Date(2026, 12, 1, 19, 30, 0, 0, time.UTC))
	if code, body, _ := do("GET", MirrorPrefix+KeyDeadline, true); code != http.StatusOK || body != "2026-12-01T19:30:00Z" {
		t.Errorf("the deadline: %d %q", code, body)
	}
	// Long polls: at the timeout with the value unchanged; at once on a
	// stale ETag.
	if code, body, again := do("GET", event+"?wait_for_change=true&timeout_sec=1&last_etag="+tag, true); code != http.StatusOK || body != "NONE" || again != tag {
		t.Errorf("a long poll on an unchanged value: %d %q %q", code, body, again)
	}
	m.Set(KeyMaintenanceEvent, Answer{Value: "TERMINATE_ON_HOST_MAINTENANCE"})
	if code, body, now := do("GET", event+"?wait_for_change=true&last_etag="+tag, true); code != http.StatusOK || body != "TERMINATE_ON_HOST_MAINTENANCE" || now == tag {
		t.Errorf("a long poll on a stale ETag: %d %q %q", code, body, now)
	}
}
