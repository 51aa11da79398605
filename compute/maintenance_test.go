package compute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

func setup(t *testing.T) (*gceemu.Server, *Maintainer, Instance) {
	t.Helper()
	emu := gceemu.StartT(t, gceemu.Config{Project: "p1", ProjectNumber: 42, Zone: "us-east5-a", Name: "gpu-0", ServiceAccount: "node@p1.iam.gserviceaccount.com"})
	t.Setenv("GCE_METADATA_HOST", emu.Host()) // the token comes from the emulated metadata server
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	inst, err := InstanceFromMetadata(ctx, gcemetadata.NewWithOptions(&gcemetadata.Options{Client: &http.Client{}}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMaintainer(ctx, Options{Endpoint: emu.ComputeEndpoint(), ServiceAccount: emu.Config().ServiceAccount, Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return emu, m, inst
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestInstanceFromMetadataAndProviderID(t *testing.T) {
	_, _, inst := setup(t)
	if want := (Instance{Project: "p1", Zone: "us-east5-a", Name: "gpu-0"}); inst != want {
		t.Errorf("from metadata: %+v, want %+v", inst, want)
	}
	got, err := InstanceFromProviderID("gce://p1/us-east5-a/gpu-0")
	if err != nil || got != inst {
		t.Errorf("from providerID: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "aws:///us-east-1a/i-1", "gce://p1/us-east5-a", "gce://p1//gpu-0", "gce://p1/z/n/extra"} {
		if _, err := InstanceFromProviderID(bad); err == nil {
			t.Errorf("providerID %q accepted", bad)
		}
	}
}

func TestPerformMaintenanceCallsOnceWithTheVMToken(t *testing.T) {
	emu, m, inst := setup(t)
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Hour))
	op, err := m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-1")
	if err != nil || !strings.HasPrefix(op, "operation-") {
		t.Fatalf("PerformMaintenance = %q, %v", op, err)
	}
	calls := emu.Calls()
	want := []gceemu.Call{{Method: "performMaintenance", Project: "p1", Zone: "us-east5-a", Instance: "gpu-0", Token: emu.AccessToken(), RequestID: "req-1", Status: 200}}
	if d := cmp.Diff(want, calls, cmpIgnoreAt); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	if got := emu.MaintenanceEvent(); got != gceemu.EventTerminate {
		t.Errorf("maintenance-event after the call: %q, want %s", got, gceemu.EventTerminate)
	}
}

var cmpIgnoreAt = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".At" }, cmp.Ignore())

func TestPerformMaintenanceRetriesTransientErrors(t *testing.T) {
	emu, m, inst := setup(t)
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Hour))
	emu.InjectFault(gceemu.Fault{Path: gceemu.ComputePrefix, Kind: gceemu.FaultStatus, Status: 503, Times: 2,
		Body: `{"error":{"code":503,"message":"backendError"}}`})
	if _, err := m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-2"); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}
	if calls := emu.Calls(); len(calls) != 1 || calls[0].Status != 200 {
		t.Errorf("calls that reached the API: %+v, want one successful call", calls)
	}
}

func TestPerformMaintenanceRefusals(t *testing.T) {
	emu, m, inst := setup(t)
	// Nothing pending: refused at once, no retry.
	_, err := m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-3")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no pending maintenance") {
		t.Errorf("nothing pending: %v, want ErrRefused saying so", err)
	}
	if n := len(emu.Calls()); n != 1 {
		t.Errorf("%d calls for a refusal, want 1 (no retry)", n)
	}
	// Permission denied: names the permission and the account.
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Hour))
	emu.SetPermissionDenied(true)
	_, err = m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-4")
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), Permission) || !strings.Contains(err.Error(), "node@p1.iam.gserviceaccount.com") {
		t.Errorf("denied: %v, want ErrPermissionDenied naming %s and the service account", err, Permission)
	}
	// A server that keeps failing: retried until the context ends.
	emu.SetPermissionDenied(false)
	emu.InjectFault(gceemu.Fault{Path: gceemu.ComputePrefix, Kind: gceemu.FaultStatus, Status: 503})
	_, err = m.PerformMaintenance(ctxT(t, 300*time.Millisecond), inst, "req-5")
	if err == nil || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("permanent 503: %v, want a give-up once the context ends", err)
	}
}

// TestWaitOperation: the accepted call's operation is followed to DONE; one
// that ends with an error is ErrOperationFailed with Compute Engine's words.
func TestWaitOperation(t *testing.T) {
	emu, m, inst := setup(t)
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Hour))
	op, err := m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-ok")
	if err != nil {
		t.Fatal(err)
	}
	if ended, err := m.WaitOperation(ctxT(t, 30*time.Second), inst, op); err != nil || ended.IsZero() || ended.After(time.Now()) {
		t.Errorf("a successful operation: ended %v, %v; want its end, and no error", ended, err)
	}
	emu.Clear()
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), time.Hour))
	emu.SetOperationFailure("the host is not available")
	op, err = m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-fail")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.WaitOperation(ctxT(t, 30*time.Second), inst, op)
	if !errors.Is(err, ErrOperationFailed) || !strings.Contains(err.Error(), "the host is not available") {
		t.Errorf("a failed operation: %v, want ErrOperationFailed with the reason", err)
	}
	if _, err := m.WaitOperation(ctxT(t, 300*time.Millisecond), inst, "no-such-operation"); err == nil {
		t.Error("an unknown operation: no error once the context ended")
	}
	// A role without zoneOperations.get: said at once, naming the
	// permission, not retried until the context ends.
	emu.Clear()
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), time.Hour))
	op, err = m.PerformMaintenance(ctxT(t, 30*time.Second), inst, "req-unfollowed")
	if err != nil {
		t.Fatal(err)
	}
	emu.Deny(gceemu.PermissionGetOperation, true)
	_, err = m.WaitOperation(ctxT(t, 10*time.Second), inst, op)
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), OperationPermission) || !strings.Contains(err.Error(), "node@p1.iam.gserviceaccount.com") {
		t.Errorf("operation read denied: %v, want ErrPermissionDenied naming %s and the service account", err, OperationPermission)
	}
}

// TestOperationEnded: an operation's end is its endTime as Compute Engine
// writes it (milliseconds, a US Pacific offset), or when it was read DONE
// where it has none that can be read.
func TestOperationEnded(t *testing.T) {
	read := time.Date(2026, 11, 6, 18, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		end  string
		want time.Time
	}{
		{"2026-11-06T09:12:31.504-08:00", time.Date(2026, 11, 6, 17, 12, 31, 504e6, time.UTC)},
		{"", read},
		{"yesterday", read},
	} {
		if got := (&operation{EndTime: tc.end}).ended(read); !got.Equal(tc.want) {
			t.Errorf("endTime %q: ended %v, want %v", tc.end, got, tc.want)
		}
	}
}

// TestMethodsArePermissionsTheEmulatorChecks: every method the client calls
// names the permission Compute Engine checks for it.
func TestMethodsArePermissionsTheEmulatorChecks(t *testing.T) {
	want := map[string]string{"instances.performMaintenance": gceemu.PermissionPerformMaintenance, "zoneOperations.get": gceemu.PermissionGetOperation,
		"instances.reportHostAsFaulty": gceemu.PermissionReportHostAsFaulty, "instances.get": gceemu.PermissionGetInstance}
	if len(Methods) != len(want) {
		t.Errorf("Methods %v, want %v", Methods, want)
	}
	want["reservationSubBlocks.performMaintenance"] = gceemu.PermissionSubBlockMaintenance
	want["reservationBlocks.performMaintenance"] = gceemu.PermissionBlockMaintenance
	want["reservationSubBlocks.list"] = gceemu.PermissionListSubBlocks
	want["reservationBlocks.list"] = gceemu.PermissionListBlocks
	if len(OptionalMethods) != 4 {
		t.Errorf("OptionalMethods %v", OptionalMethods)
	}
	for _, m := range append(append([]Method(nil), Methods...), OptionalMethods...) {
		if want[m.Name] != m.Permission {
			t.Errorf("method %s needs %s, not %s", m.Name, want[m.Name], m.Permission)
		}
	}
}

// TestReportHostAsFaulty: the report names IMMEDIATE, the behavior and the
// description; a retry with the same request ID is the same operation; a
// 403 names the permission.
func TestReportHostAsFaulty(t *testing.T) {
	emu, m, inst := setup(t)
	op, err := m.ReportHostAsFaulty(ctxT(t, 30*time.Second), inst, "req-f", "UNRECOVERABLE_GPU_ERROR", "condition GPUUnhealthy")
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.ReportHostAsFaulty(ctxT(t, 30*time.Second), inst, "req-f", "UNRECOVERABLE_GPU_ERROR", "condition GPUUnhealthy")
	if err != nil || again != op {
		t.Fatalf("the retry: %q, %v; want the same operation %q", again, err, op)
	}
	if _, err := m.WaitOperation(ctxT(t, 30*time.Second), inst, op); err != nil {
		t.Fatalf("the report's operation: %v", err)
	}
	calls := emu.Calls()
	if len(calls) != 2 {
		t.Fatalf("calls: %+v", calls)
	}
	c := calls[0]
	want := gceemu.Call{Method: "reportHostAsFaulty", Project: "p1", Zone: "us-east5-a", Instance: "gpu-0", Behavior: "UNRECOVERABLE_GPU_ERROR",
		Description: "condition GPUUnhealthy", Schedule: "IMMEDIATE", RequestID: "req-f", Status: http.StatusOK}
	c.Token, c.At = "", time.Time{}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("the report (-want +got):\n%s", d)
	}
	emu.Tolerate(`"NOT_A_BEHAVIOR" is none of`) // sent to be refused
	if _, err := m.ReportHostAsFaulty(ctxT(t, 30*time.Second), inst, "req-g", "NOT_A_BEHAVIOR", ""); !errors.Is(err, ErrRefused) {
		t.Errorf("an unknown behavior: %v, want refused", err)
	}
	emu.Deny(gceemu.PermissionReportHostAsFaulty, true)
	_, err = m.ReportHostAsFaulty(ctxT(t, 30*time.Second), inst, "req-h", "CHIP_ERROR", "")
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), ReportPermission) {
		t.Errorf("denied: %v, want ErrPermissionDenied naming %s", err, ReportPermission)
	}
}

// TestPreemptionNotice: instances.get says whether the VM is Spot and its
// preemption notice; a 403 names the permission.
func TestPreemptionNotice(t *testing.T) {
	for _, tc := range []struct {
		cfg    gceemu.Config
		spot   bool
		notice time.Duration
	}{
		{gceemu.Config{Preemptible: true, PreemptionNotice: 2 * time.Minute}, true, 2 * time.Minute},
		{gceemu.Config{Preemptible: true}, true, 0},
		{gceemu.Config{}, false, 0},
	} {
		tc.cfg.Project, tc.cfg.Zone, tc.cfg.Name = "p1", "us-east5-a", "gpu-0"
		emu := gceemu.StartT(t, tc.cfg)
		t.Setenv("GCE_METADATA_HOST", emu.Host())
		m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emu.ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		inst := Instance{Project: "p1", Zone: "us-east5-a", Name: "gpu-0"}
		sc, err := m.Scheduling(ctxT(t, 10*time.Second), inst)
		if err != nil || sc.Spot != tc.spot || sc.PreemptionNotice != tc.notice {
			t.Errorf("%+v: spot %t, notice %s, %v; want %t, %s", tc.cfg, sc.Spot, sc.PreemptionNotice, err, tc.spot, tc.notice)
		}
		emu.Deny(gceemu.PermissionGetInstance, true)
		if _, err := m.Scheduling(ctxT(t, 10*time.Second), inst); !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), GetPermission) {
			t.Errorf("denied: %v, want ErrPermissionDenied naming %s", err, GetPermission)
		}
	}
}

// TestKnownEnd: instances.get says when the VM's time limit ends it, and
// how; a VM without one has no end.
func TestKnownEnd(t *testing.T) {
	end := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		limit *gceemu.TimeLimit
		cause string
	}{
		{nil, ""},
		{&gceemu.TimeLimit{End: end, MaxRunDuration: 7 * 24 * time.Hour, Action: "DELETE", FlexStart: true}, "a flex-start VM, maxRunDuration 604800s; Compute Engine deletes the VM then"},
		{&gceemu.TimeLimit{End: end, TerminationTime: end}, "terminationTime 2026-12-01T08:00:00Z; Compute Engine stops the VM then"},
	} {
		emu := gceemu.StartT(t, gceemu.Config{Project: "p1", Zone: "us-east5-a", Name: "gpu-0", TimeLimit: tc.limit})
		t.Setenv("GCE_METADATA_HOST", emu.Host())
		m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emu.ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := m.Scheduling(ctxT(t, 10*time.Second), Instance{Project: "p1", Zone: "us-east5-a", Name: "gpu-0"})
		wantEnd := time.Time{}
		if tc.limit != nil {
			wantEnd = end
		}
		if err != nil || !sc.End.Equal(wantEnd) || sc.EndCause != tc.cause {
			t.Errorf("%+v: end %s (%q), %v; want %s (%q)", tc.limit, sc.End, sc.EndCause, err, wantEnd, tc.cause)
		}
	}
}

// TestPerformGroupMaintenance: the VM names its reservation sub-block in
// its instances.get; one call on the sub-block starts the maintenance of
// every instance in it, and a retry with the same requestId is the same
// operation; a block call carries its scope; a VM in no reservation says
// so; a 403 names the permission.
func TestPerformGroupMaintenance(t *testing.T) {
	emus, m := reservationVMs(t, "sub-1", "sub-1", "sub-2")
	inst := Instance{Project: "p1", Zone: "us-east5-a", Name: "gpu-0"}
	sc, err := m.Scheduling(ctxT(t, 10*time.Second), inst)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := sc.Consumption.Group(inst)
	want := ReservationGroup{Project: "p1", Zone: "us-east5-a", Reservation: "res-a", Block: "block-1", SubBlock: "sub-1"}
	if !ok || g != want {
		t.Fatalf("consumed %+v read as %+v (%t); want %+v", sc.Consumption, g, ok, want)
	}
	if where := (PhysicalTopology{Block: "block-1", Subblock: "sub-1", Host: "gpu-0"}); sc.Topology != where {
		t.Errorf("the VM's physical topology %+v; want %+v (resourceStatus.physicalHostTopology)", sc.Topology, where)
	}
	emus[1].ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), time.Hour))
	states, err := m.ReservationGroups(ctxT(t, 10*time.Second), Reservation{Project: "p1", Zone: "us-east5-a", Name: "res-a"})
	if err != nil {
		t.Fatal(err)
	}
	pending := map[string][2]int{}
	for _, st := range states {
		pending[st.Group.String()] = [2]int{st.Pending, st.Count}
	}
	block := want
	block.SubBlock = ""
	sub2 := want
	sub2.SubBlock = "sub-2"
	if w := map[string][2]int{block.String(): {1, 3}, want.String(): {1, 2}, sub2.String(): {0, 1}}; !maps.Equal(pending, w) {
		t.Errorf("groups (pending, hosts) %v; want %v", pending, w)
	}
	op, err := m.PerformGroupMaintenance(ctxT(t, 10*time.Second), g, "", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := m.PerformGroupMaintenance(ctxT(t, 10*time.Second), g, "", "req-1"); err != nil || again != op {
		t.Errorf("the retried call: %s, %v; want the same operation %s", again, err, op)
	}
	for i, emu := range emus {
		deadline := time.Now().Add(10 * time.Second)
		for emu.MaintenanceEvent() != gceemu.EventTerminate && time.Now().Before(deadline) && i < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		if got, in := emu.MaintenanceEvent() == gceemu.EventTerminate, i < 2; got != in {
			t.Errorf("gpu-%d in maintenance: %t; want %t (in the sub-block: %t)", i, got, in, in)
		}
	}
	calls := emus[0].Calls()
	if len(calls) != 2 || calls[0].Method != "reservationSubBlocks.performMaintenance" || calls[0].Resource != want.String() {
		t.Errorf("calls %+v; want the sub-block's, twice (one retry)", calls)
	}

	if _, err := m.PerformGroupMaintenance(ctxT(t, 10*time.Second), block, ScopeUnusedCapacity, "req-2"); err != nil {
		t.Fatal(err)
	}
	if c := emus[0].Calls()[2]; c.Method != "reservationBlocks.performMaintenance" || c.Scope != ScopeUnusedCapacity {
		t.Errorf("the block call %+v; want its scope %s", c, ScopeUnusedCapacity)
	}
	emus[0].Deny(gceemu.PermissionSubBlockMaintenance, true)
	if _, err := m.PerformGroupMaintenance(ctxT(t, 10*time.Second), g, "", "req-3"); !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), SubBlockPermission) {
		t.Errorf("denied: %v; want ErrPermissionDenied naming %s", err, SubBlockPermission)
	}
	if _, ok := (Consumption{Reservation: "projects/p1/zones/us-east5-a/reservations/res-a"}).Group(inst); ok {
		t.Error("a reservation with no block read as a group")
	}
	// The old reading: the block inside consumedReservation is no field
	// of Compute Engine's; a block named in its own field is the group.
	if g, ok := (Consumption{Reservation: "projects/p1/zones/us-east5-a/reservations/res-a",
		Block: "projects/p1/zones/us-east5-a/reservations/res-a/reservationBlocks/b-9"}).Group(inst); !ok || g.Block != "b-9" || g.SubBlock != "" {
		t.Errorf("a block named in consumedReservationBlock read as %+v (%t); want the block b-9", g, ok)
	}
}

// reservationVMs starts an emulated VM gpu-I of block-1 of the GROUPED
// reservation res-a in sub-block subBlocks[I], the first one's metadata
// server the test's, and a Maintainer that calls the first one's Compute
// API.
func reservationVMs(t *testing.T, subBlocks ...string) ([]*gceemu.Server, *Maintainer) {
	t.Helper()
	var emus []*gceemu.Server
	members := map[*gceemu.Server]gceemu.SubBlock{}
	for i, sub := range subBlocks {
		emu := gceemu.StartT(t, gceemu.Config{Project: "p1", Zone: "us-east5-a", Name: fmt.Sprintf("gpu-%d", i)})
		emus = append(emus, emu)
		members[emu] = gceemu.SubBlock{Reservation: "res-a", Block: "block-1", SubBlock: sub}
	}
	gceemu.JoinReservation(members)
	t.Setenv("GCE_METADATA_HOST", emus[0].Host())
	m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emus[0].ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return emus, m
}
