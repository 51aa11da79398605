package gceemu

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"
)

type apiAnswer struct {
	status int
	body   map[string]any
}

func post(t *testing.T, s *Server, path, token string) apiAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, s.ComputeEndpoint()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) apiAnswer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("answer %q is not JSON: %v", raw, err)
	}
	return apiAnswer{resp.StatusCode, body}
}

func errorMessage(a apiAnswer) string {
	e, _ := a.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

const pmPath = "projects/p1/zones/us-central1-a/instances/gpu-0/performMaintenance"

func TestPerformMaintenance(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	s, _ := start(t, Config{Project: "p1", Zone: "us-central1-a", Name: "gpu-0", Clock: fc})
	s.SetPerformMaintenanceDelay(10 * time.Second)
	token := s.AccessToken()

	// Refusals: no token, nothing pending, not reschedulable, wrong instance.
	if a := post(t, s, pmPath, ""); a.status != 401 {
		t.Errorf("no token: %d %v, want 401", a.status, a.body)
	}
	if a := post(t, s, pmPath, "wrong"); a.status != 401 {
		t.Errorf("wrong token: %d %v, want 401", a.status, a.body)
	}
	if a := post(t, s, pmPath, token); a.status != 400 || !strings.Contains(errorMessage(a), "no pending maintenance") {
		t.Errorf("nothing pending: %d %q, want 400 saying so", a.status, errorMessage(a))
	}
	n := ScheduledNotice(fc.Now().Add(14*24*time.Hour), 4*time.Hour)
	n.CanReschedule = false
	s.ScheduleNotice(n)
	if a := post(t, s, pmPath, token); a.status != 400 || !strings.Contains(errorMessage(a), "cannot be rescheduled") {
		t.Errorf("not reschedulable: %d %q, want 400 saying so", a.status, errorMessage(a))
	}
	n.CanReschedule = true
	s.ScheduleNotice(n)
	if a := post(t, s, strings.Replace(pmPath, "gpu-0", "gpu-9", 1), token); a.status != 404 {
		t.Errorf("other instance: %d, want 404", a.status)
	}
	s.SetPermissionDenied(true)
	if a := post(t, s, pmPath, token); a.status != 403 || !strings.Contains(errorMessage(a), "compute.instances.performMaintenance") {
		t.Errorf("denied: %d %q, want 403 naming the permission", a.status, errorMessage(a))
	}
	s.SetPermissionDenied(false)

	// Accepted: an Operation, RUNNING until the delay has passed.
	a := post(t, s, pmPath+"?requestId=r-1", token)
	if a.status != 200 || a.body["kind"] != "compute#operation" || a.body["operationType"] != "performMaintenance" || a.body["status"] != "RUNNING" {
		t.Fatalf("accepted: %d %v, want a RUNNING performMaintenance operation", a.status, a.body)
	}
	if got, _ := s.Notice(); got.MaintenanceStatus != StatusPending || got.CanReschedule {
		t.Errorf("right after the call: notice %+v, want PENDING and no longer reschedulable", got)
	}
	// A retry with the same requestId gets the same operation.
	if again := post(t, s, pmPath+"?requestId=r-1", token); again.body["name"] != a.body["name"] {
		t.Errorf("retry with the same requestId: operation %v, want %v", again.body["name"], a.body["name"])
	}
	fc.Step(10 * time.Second)
	waitFor(t, "the notice to turn ONGOING", func() bool { got, _ := s.Notice(); return got.MaintenanceStatus == StatusOngoing })
	if got := s.MaintenanceEvent(); got != EventTerminate {
		t.Errorf("maintenance-event = %q, want %s", got, EventTerminate)
	}
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, s.ComputeEndpoint()+"projects/p1/zones/us-central1-a/operations/"+a.body["name"].(string), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if op := do(t, req); op.status != 200 || op.body["status"] != "DONE" {
		t.Errorf("operation after the delay: %d %v, want DONE", op.status, op.body)
	}
	// Once ONGOING, a second call is refused.
	if a := post(t, s, pmPath, token); a.status != 400 || !strings.Contains(errorMessage(a), "already ONGOING") {
		t.Errorf("second call: %d %q, want 400 already ONGOING", a.status, errorMessage(a))
	}

	want := []Call{
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Status: 401},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: "wrong", Status: 401},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, Status: 400},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, Status: 400},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-9", Token: token, Status: 404},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, Status: 403},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, RequestID: "r-1", Status: 200},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, RequestID: "r-1", Status: 200},
		{Method: "performMaintenance", Project: "p1", Zone: "us-central1-a", Instance: "gpu-0", Token: token, Status: 400},
	}
	if d := cmp.Diff(want, s.Calls(), cmpopts.IgnoreFields(Call{}, "At")); d != "" {
		t.Errorf("recorded calls (-want +got):\n%s", d)
	}
}

func TestPerformMaintenanceFaults(t *testing.T) {
	s, _ := start(t, Config{Project: "p1", Zone: "us-central1-a", Name: "gpu-0"})
	s.ScheduleNotice(ScheduledNotice(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Hour))
	s.InjectFault(Fault{Path: ComputePrefix, Kind: FaultStatus, Status: 503, Times: 2, Body: `{"error":{"code":503,"message":"backendError"}}`})
	for i := range 2 {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, s.ComputeEndpoint()+pmPath, nil)
		req.Header.Set("Authorization", "Bearer "+s.AccessToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Errorf("attempt %d: %d, want 503", i+1, resp.StatusCode)
		}
	}
	if a := post(t, s, pmPath, s.AccessToken()); a.status != 200 {
		t.Errorf("third attempt: %d %v, want 200", a.status, a.body)
	}
	if got := len(s.Calls()); got != 1 {
		t.Errorf("recorded %d calls, want 1 (faults never reach the API)", got)
	}
	if got := s.MaintenanceEvent(); got != EventTerminate {
		t.Errorf("with no delay the event is %q at once, want %s", got, EventTerminate)
	}
}

// TestSliceMaintenanceStartsOnEveryInstance: one call on one instance of
// a multi-host slice puts every instance into maintenance, the instance
// with no notice of its own included; the call is recorded once.
func TestSliceMaintenanceStartsOnEveryInstance(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	var hosts []*Server
	for i, name := range []string{"gpu-0", "gpu-1", "gpu-2"} {
		s, _ := start(t, Config{Project: "p1", Zone: "us-central1-a", Name: name, Clock: fc, NoMaintenanceEvent: true})
		s.SetPerformMaintenanceDelay(10 * time.Second)
		if i < 2 {
			s.ScheduleNotice(ScheduledNotice(fc.Now().Add(14*24*time.Hour), 4*time.Hour))
		}
		hosts = append(hosts, s)
	}
	JoinSlice(hosts...)
	if a := post(t, hosts[0], pmPath, hosts[0].AccessToken()); a.status != 200 {
		t.Fatalf("call: %d %v", a.status, a.body)
	}
	waitFor(t, "the other instance's notice to be no longer reschedulable", func() bool {
		n, _ := hosts[1].Notice()
		return !n.CanReschedule
	})
	if n, _ := hosts[1].Notice(); n.MaintenanceStatus != StatusPending {
		t.Errorf("before the maintenance begins: %+v, want PENDING", n)
	}
	fc.Step(10 * time.Second)
	for _, s := range hosts {
		waitFor(t, s.cfg.Name+"'s notice to turn ONGOING", func() bool {
			n, ok := s.Notice()
			return ok && n.MaintenanceStatus == StatusOngoing && n.WindowStartTime == fc.Now().UTC().Format(time.RFC3339)
		})
	}
	calls := 0
	for _, s := range hosts {
		calls += len(s.Calls())
	}
	if calls != 1 {
		t.Errorf("%d calls recorded across the slice, want 1", calls)
	}
}

// TestReportRunsItsDocumentedTime: a report's operation stays RUNNING for
// the time set (Google documents "usually 10-12 minutes"), the VM RUNNING
// with it; a second report meanwhile fails with
// FAILED_WITH_UNEXPECTED_STATUS; what Compute Engine does next (the
// host's repair, which stops the VM) starts when the operation ends, not
// when the report is taken.
func TestReportRunsItsDocumentedTime(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	s, _ := start(t, Config{Project: "p1", Zone: "us-central1-a", Name: "gpu-0", Clock: fc})
	s.SetReportDuration(16 * time.Minute)
	repaired := make(chan Call, 2)
	s.SetOnReport(func(c Call) { repaired <- c })
	report := func(id string) apiAnswer {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, s.ComputeEndpoint()+"projects/p1/zones/us-central1-a/instances/gpu-0/reportHostAsFaulty?requestId="+id,
			strings.NewReader(`{"disruptionSchedule":"IMMEDIATE","faultReasons":[{"behavior":"CHIP_ERROR","description":"GPU 3"}]}`))
		req.Header.Set("Authorization", "Bearer "+s.AccessToken())
		return do(t, req)
	}
	operation := func(name string) apiAnswer {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, s.ComputeEndpoint()+"projects/p1/zones/us-central1-a/operations/"+name, nil)
		req.Header.Set("Authorization", "Bearer "+s.AccessToken())
		return do(t, req)
	}
	first := report("r-1")
	name, _ := first.body["name"].(string)
	if first.status != 200 || first.body["status"] != "RUNNING" {
		t.Fatalf("report: %d %v, want a RUNNING operation", first.status, first.body)
	}
	fc.Step(15 * time.Minute)
	if op := operation(name); op.body["status"] != "RUNNING" {
		t.Errorf("15 minutes on: %v, want RUNNING", op.body["status"])
	}
	second := operation(report("r-2").body["name"].(string))
	if second.body["status"] != "DONE" || !strings.Contains(fmt.Sprint(second.body["error"]), "FAILED_WITH_UNEXPECTED_STATUS") {
		t.Errorf("a second report while the first runs: %v, want an operation failed with FAILED_WITH_UNEXPECTED_STATUS", second.body)
	}
	select {
	case <-repaired:
		t.Fatal("the repair began while the report's operation ran")
	default:
	}
	fc.Step(time.Minute)
	if op := operation(name); op.body["status"] != "DONE" || op.body["error"] != nil {
		t.Errorf("16 minutes on: %v, want DONE without an error", op.body)
	}
	select {
	case c := <-repaired:
		if c.RequestID != "r-1" {
			t.Errorf("the repair began for %q, want r-1", c.RequestID)
		}
	case <-ctxT(t).Done():
		t.Error("the repair never began after the report's operation ended")
	}
}
