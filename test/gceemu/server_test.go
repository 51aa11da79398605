package gceemu

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/metadata"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

// start runs an emulator for one test and points the official client at it.
func start(t *testing.T, cfg Config) (*Server, *metadata.Client) {
	t.Helper()
	s := New(cfg)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t.Setenv("GCE_METADATA_HOST", s.Host())
	return s, metadata.NewWithOptions(&metadata.Options{Client: &http.Client{}})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawGet sends a GET with the metadata header (unless header is false).
func rawGet(t *testing.T, s *Server, suffix string, header bool) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, s.URL()+MetadataPrefix+suffix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header {
		req.Header.Set("Metadata-Flavor", "Google")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

var etagRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestHeaderContract(t *testing.T) {
	s, _ := start(t, Config{})
	resp, body := rawGet(t, s, "instance/maintenance-event", false)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `Missing required header "Metadata-Flavor": "Google"`) {
		t.Errorf("without header: got %d %q, want 403 naming the header", resp.StatusCode, body)
	}
	resp, body = rawGet(t, s, "instance/maintenance-event", true)
	if resp.StatusCode != http.StatusOK || body != "NONE" {
		t.Errorf("with header: got %d %q, want 200 NONE", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Metadata-Flavor"); got != "Google" {
		t.Errorf("Metadata-Flavor = %q, want Google", got)
	}
	if got := resp.Header.Get("ETag"); !etagRE.MatchString(got) {
		t.Errorf("ETag = %q, want 16 hex digits", got)
	}
}

func TestInstanceKeysThroughOfficialClient(t *testing.T) {
	s, c := start(t, Config{Project: "p1", ProjectNumber: 42, Zone: "europe-west4-b", Name: "gpu-0", ID: 77, ServiceAccount: "sa@p1.iam.gserviceaccount.com"})
	s.SetAttribute("cluster-name", "c1")
	ctx := ctxT(t)
	for suffix, want := range map[string]string{
		"instance/maintenance-event":              "NONE",
		"instance/preempted":                      "FALSE",
		"instance/name":                           "gpu-0",
		"instance/id":                             "77",
		"instance/zone":                           "projects/42/zones/europe-west4-b",
		"project/project-id":                      "p1",
		"instance/attributes/cluster-name":        "c1",
		"instance/attributes/":                    "cluster-name\n",
		"instance/service-accounts/default/email": "sa@p1.iam.gserviceaccount.com",
	} {
		got, err := c.GetWithContext(ctx, suffix)
		if err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q", suffix, got, err, want)
		}
	}
	zone, err := c.ZoneWithContext(ctx)
	if err != nil || zone != "europe-west4-b" {
		t.Errorf("Zone = %q, %v; want europe-west4-b", zone, err)
	}
	tok, err := c.GetWithContext(ctx, "instance/service-accounts/default/token")
	if err != nil {
		t.Fatal(err)
	}
	var token struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal([]byte(tok), &token); err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	if token.AccessToken != s.AccessToken() || token.TokenType != "Bearer" || token.ExpiresIn <= 0 {
		t.Errorf("token = %+v, want the emulator's bearer token", token)
	}
	if _, err := c.GetWithContext(ctx, "instance/attributes/missing"); !errors.As(err, new(metadata.NotDefinedError)) {
		t.Errorf("missing attribute: err = %v, want NotDefinedError", err)
	}
}

func TestUpcomingMaintenanceAbsence(t *testing.T) {
	tests := []struct {
		absence    Absence
		wantStatus int
		wantBody   string
	}{
		{AbsentEmptyObject, 200, "{ }"},
		{AbsentUnavailable, 503, NoUpcomingBody},
		{AbsentNotFound, 404, "Not Found\n"},
		{AbsentNone, 200, `"NONE"`},
	}
	for _, tc := range tests {
		s, _ := start(t, Config{Absence: tc.absence})
		resp, body := rawGet(t, s, "instance/upcoming-maintenance?alt=json", true)
		if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
			t.Errorf("absence %d: got %d %q, want %d %q", tc.absence, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
		}
	}
	// Through the official client: 404 is NotDefinedError, 503 an Error
	// carrying the body once the client's retries are spent.
	_, c := start(t, Config{Absence: AbsentNotFound})
	if _, err := c.GetWithContext(ctxT(t), "instance/upcoming-maintenance?alt=json"); !errors.As(err, new(metadata.NotDefinedError)) {
		t.Errorf("404 absence: err = %v, want NotDefinedError", err)
	}
	_, c = start(t, Config{Absence: AbsentUnavailable})
	_, err := c.GetWithContext(ctxT(t), "instance/upcoming-maintenance?alt=json")
	var merr *metadata.Error
	if !errors.As(err, &merr) || merr.Code != 503 || merr.Message != NoUpcomingBody {
		t.Errorf("503 absence: err = %v, want metadata.Error 503 with the documented body", err)
	}
}

func TestNoticeIsSnakeCaseJSON(t *testing.T) {
	s, c := start(t, Config{})
	start := time.Date(2026, 12, 1, 19, 0, 1, 0, time.UTC)
	s.ScheduleNotice(ScheduledNotice(start, 2*time.Hour))
	body, err := c.GetWithContext(ctxT(t), "instance/upcoming-maintenance?alt=json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("notice %q: %v", body, err)
	}
	want := map[string]any{
		"can_reschedule":           true,
		"latest_window_start_time": "2026-12-01T19:00:01Z",
		"maintenance_reasons":      []any{"PLANNED_UPDATE"},
		"maintenance_status":       "PENDING",
		"type":                     "SCHEDULED",
		"window_end_time":          "2026-12-01T21:00:01Z",
		"window_start_time":        "2026-12-01T19:00:01Z",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("notice (-want +got):\n%s", d)
	}
}

// TestScenarioThroughSubscribe drives one instance through a whole
// maintenance and a preemption while three official-client subscriptions
// watch, and checks the values each one saw, in order.
func TestScenarioThroughSubscribe(t *testing.T) {
	s, c := start(t, Config{})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	chans := map[string]chan string{}
	subscribe := func(key, suffix string) {
		ch := make(chan string, 16)
		chans[key] = ch
		go func() {
			_ = c.SubscribeWithContext(ctx, suffix, func(_ context.Context, v string, ok bool) error {
				ch <- v
				return nil
			})
		}()
	}
	next := func(key, want string) {
		t.Helper()
		select {
		case got := <-chans[key]:
			if got != want {
				t.Fatalf("%s: got %q, want %q", key, got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: never saw %q", key, want)
		}
	}
	subscribe("event", "instance/maintenance-event")
	next("event", "NONE")
	subscribe("preempted", "instance/preempted")
	next("preempted", "FALSE")
	subscribe("notice", "instance/upcoming-maintenance?alt=json")
	next("notice", "{ }")

	n := ScheduledNotice(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), time.Hour)
	s.ScheduleNotice(n)
	pending, _ := json.Marshal(n)
	next("notice", string(pending))

	s.SetNoticeStatus(StatusOngoing)
	n.MaintenanceStatus = StatusOngoing
	ongoing, _ := json.Marshal(n)
	next("notice", string(ongoing))

	s.SetMaintenanceEvent(EventTerminate)
	next("event", EventTerminate)

	s.Clear()
	next("event", EventNone)
	next("notice", "{ }")

	s.SetPreempted(true)
	next("preempted", "TRUE")
}

// longPoll starts a raw wait_for_change request and returns a channel with
// its answer.
type polled struct {
	status int
	body   string
	etag   string
	err    error
}

func longPoll(ctx context.Context, s *Server, suffix string) <-chan polled {
	out := make(chan polled, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+MetadataPrefix+suffix, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- polled{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		out <- polled{status: resp.StatusCode, body: string(body), etag: resp.Header.Get("ETag"), err: err}
	}()
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := ctxT(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestLongPollSemantics(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	s, _ := start(t, Config{Clock: fc})
	ctx := ctxT(t)
	resp, _ := rawGet(t, s, "instance/maintenance-event", true)
	etag := resp.Header.Get("ETag")

	// A different last_etag answers at once, with the current value. The
	// fake clock never moves here, so a hang would never end.
	got := <-longPoll(ctx, s, "instance/maintenance-event?wait_for_change=true&last_etag=0000000000000000&timeout_sec=60")
	if got.err != nil || got.status != 200 || got.body != "NONE" || got.etag != etag {
		t.Errorf("stale last_etag: got %+v, want NONE with ETag %s at once", got, etag)
	}

	// The current last_etag hangs until timeout_sec, then re-delivers the
	// unchanged value with the same ETag.
	ch := longPoll(ctx, s, "instance/maintenance-event?wait_for_change=true&last_etag="+etag+"&timeout_sec=60")
	waitFor(t, "the poll to hang", func() bool { return s.Waiting() == 1 && fc.HasWaiters() })
	fc.Step(59 * time.Second)
	select {
	case got := <-ch:
		t.Fatalf("answered before timeout_sec: %+v", got)
	default:
	}
	fc.Step(time.Second)
	got = <-ch
	if got.err != nil || got.status != 200 || got.body != "NONE" || got.etag != etag {
		t.Errorf("timeout: got %+v, want the unchanged NONE with ETag %s", got, etag)
	}

	// A change answers the hanging poll with the new value and a new ETag.
	ch = longPoll(ctx, s, "instance/maintenance-event?wait_for_change=true&last_etag="+etag)
	waitFor(t, "the poll to hang", func() bool { return s.Waiting() == 1 })
	s.SetPreempted(true) // another key: must not wake this poll with an answer
	s.SetMaintenanceEvent(EventTerminate)
	got = <-ch
	if got.err != nil || got.body != EventTerminate || got.etag == etag || !etagRE.MatchString(got.etag) {
		t.Errorf("change: got %+v, want %s with a new ETag", got, EventTerminate)
	}

	// wait_for_change without last_etag hangs until the value changes.
	ch = longPoll(ctx, s, "instance/preempted?wait_for_change=true")
	waitFor(t, "the poll to hang", func() bool { return s.Waiting() == 1 })
	s.SetPreempted(false)
	if got := <-ch; got.body != "FALSE" {
		t.Errorf("preempted change: got %+v, want FALSE", got)
	}

	// An ETag reset answers a hanging poll with the unchanged value under a
	// new ETag, as a restarted metadata server would.
	resp, _ = rawGet(t, s, "instance/maintenance-event", true)
	etag = resp.Header.Get("ETag")
	ch = longPoll(ctx, s, "instance/maintenance-event?wait_for_change=true&last_etag="+etag)
	waitFor(t, "the poll to hang", func() bool { return s.Waiting() == 1 })
	s.ResetETags()
	got = <-ch
	if got.body != EventTerminate || got.etag == etag {
		t.Errorf("ETag reset: got %+v, want %s under a new ETag", got, EventTerminate)
	}
}

func TestFaults(t *testing.T) {
	s, c := start(t, Config{})
	ctx := ctxT(t)
	key := MetadataPrefix + "instance/maintenance-event"

	// Two 503s: the official client retries through them.
	s.InjectFault(Fault{Path: key, Kind: FaultStatus, Times: 2})
	resp, _ := rawGet(t, s, "instance/maintenance-event", true)
	if resp.StatusCode != 503 {
		t.Errorf("first request: status %d, want 503", resp.StatusCode)
	}
	if v, err := c.GetWithContext(ctx, "instance/maintenance-event"); err != nil || v != "NONE" {
		t.Errorf("Get after one more 503: %q, %v; want NONE", v, err)
	}

	// A garbage body, once.
	s.InjectFault(Fault{Path: key, Kind: FaultGarbage, Times: 1})
	if v, err := c.GetWithContext(ctx, "instance/maintenance-event"); err != nil || v == "NONE" {
		t.Errorf("garbage: %q, %v; want a 200 body that is not a value", v, err)
	}

	// A dropped connection, every time until cleared.
	s.InjectFault(Fault{Path: key, Kind: FaultDrop})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+key, nil)
	req.Header.Set("Metadata-Flavor", "Google")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("dropped connection: got status %d, want a transport error", resp.StatusCode)
	}
	s.ClearFaults()

	// A hung request ends only when the client gives up.
	s.InjectFault(Fault{Path: key, Kind: FaultHang, Times: 1})
	hangCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if v, err := c.GetWithContext(hangCtx, "instance/maintenance-event"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %q, %v; want the client's deadline", v, err)
	}
	if v, err := c.GetWithContext(ctx, "instance/maintenance-event"); err != nil || v != "NONE" {
		t.Errorf("after the hang: %q, %v; want NONE", v, err)
	}
}

func TestCloseEndsHungPolls(t *testing.T) {
	s := New(Config{})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ch := longPoll(ctxT(t), s, "instance/maintenance-event?wait_for_change=true")
	waitFor(t, "the poll to hang", func() bool { return s.Waiting() == 1 })
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Dropped, not left hanging, and not answered with an empty value.
	if got := <-ch; got.err == nil {
		t.Errorf("a poll hanging at Close was answered: %+v", got)
	}
}
