package compute

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/test/computeapi"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

// TestEveryCallHoldsToGooglesDescription: every Compute Engine method this
// package calls, accepted and refused (a 400, a 403, a 404, a failed
// operation), is sent as Google's description of Compute Engine v1 allows
// and answered by the emulator in the shapes it describes (setup's
// gceemu.StartT fails the test on any problem either side has). Every
// method the product names a permission for is among them.
func TestEveryCallHoldsToGooglesDescription(t *testing.T) {
	emu, m, inst := setup(t)
	peer := gceemu.StartT(t, gceemu.Config{Project: "p1", Zone: "us-east5-a", Name: "gpu-1"})
	gceemu.JoinReservation(map[*gceemu.Server]gceemu.SubBlock{
		emu:  {Reservation: "res-a", Block: "block-1", SubBlock: "sub-1"},
		peer: {Reservation: "res-a", Block: "block-1", SubBlock: "sub-1"},
	})
	emu.SetTimeLimit(&gceemu.TimeLimit{End: time.Now().Add(time.Hour), MaxRunDuration: 2 * time.Hour, FlexStart: true})
	ctx := ctxT(t, time.Minute)

	sc, err := m.Scheduling(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := sc.Consumption.Group(inst)
	if !ok || g.SubBlock != "sub-1" || sc.MachineType != "a3-highgpu-8g" || sc.Status != "RUNNING" || sc.End.IsZero() {
		t.Fatalf("instances.get read as %+v (group %+v, %t)", sc, g, ok)
	}
	if _, err := m.ReservationGroups(ctx, Reservation{Project: "p1", Zone: "us-east5-a", Name: "res-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PerformMaintenance(ctx, inst, "req-none"); err == nil {
		t.Error("performMaintenance with nothing pending was accepted")
	}
	emu.ScheduleNotice(gceemu.ScheduledNotice(time.Now().Add(time.Hour), time.Hour))
	op, err := m.PerformMaintenance(ctx, inst, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitOperation(ctx, inst, op); err != nil {
		t.Fatal(err)
	}
	emu.SetOperationFailure("the host could not be maintained")
	op, err = m.ReportHostAsFaulty(ctx, inst, "req-2", "UNRECOVERABLE_GPU_ERROR", "XID 79")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitOperation(ctx, inst, op); err == nil {
		t.Error("a failed operation read as done")
	}
	emu.SetOperationFailure("")
	if _, err := m.PerformGroupMaintenance(ctx, g, "", "req-3"); err != nil {
		t.Fatal(err)
	}
	block := g
	block.SubBlock = ""
	if _, err := m.PerformGroupMaintenance(ctx, block, ScopeRunningVMs, "req-4"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{Permission, ReportPermission, OperationPermission, GetPermission} {
		emu.Deny(p, true)
	}
	if _, err := m.Scheduling(ctx, inst); err == nil {
		t.Error("a denied instances.get succeeded")
	}
	if _, err := m.ReportHostAsFaulty(ctx, inst, "req-5", "PERFORMANCE", ""); err == nil {
		t.Error("a denied report succeeded")
	}
	if _, err := m.Scheduling(ctx, Instance{Project: "p1", Zone: "us-east5-a", Name: "gone"}); err == nil {
		t.Error("instances.get of a VM that is not there succeeded")
	}

	called := map[string]bool{}
	for _, ex := range append(emu.Exchanges(), peer.Exchanges()...) {
		called[ex.MethodID] = true
	}
	for _, method := range append(append([]Method(nil), Methods...), OptionalMethods...) {
		if !called["compute."+method.Name] {
			t.Errorf("compute.%s was not called; called %v", method.Name, called)
		}
	}
}

// TestTheOldShapesFail: what the emulator served before it was held to
// Google's description fails the check (the block's maintenance under a
// field ReservationBlock does not have; an int64 written as a number; a
// timestamp that is no RFC 3339 time), and so does a request with a field
// or enum value the description does not name.
func TestTheOldShapesFail(t *testing.T) {
	d, err := computeapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	if d.Revision != computeapi.Revision {
		t.Fatalf("the description's revision is %s; want %s", d.Revision, computeapi.Revision)
	}
	list := d.MethodByID("compute.reservationBlocks.list")
	for _, tc := range []struct{ name, body, want string }{
		{"the block's maintenance under another name", `{"kind":"compute#reservationBlocksListResponse","items":[{"name":"block-1","count":4,"reservationBlockMaintenance":{"maintenancePendingCount":4,"schedulingType":"GROUPED"}}]}`,
			`unknown field "reservationBlockMaintenance"`},
		{"an int64 as a number", `{"items":[{"name":"block-1","id":1234}]}`, `want a string`},
		{"a scheduling type Compute Engine does not have", `{"items":[{"reservationMaintenance":{"schedulingType":"SYNCHRONISED"}}]}`, `is none of`},
		{"a creation time that is no time", `{"items":[{"creationTimestamp":"yesterday"}]}`, `not an RFC 3339 time`},
	} {
		problems := d.Response(list, 200, []byte(tc.body))
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.name, problems, tc.want)
		}
	}
	for _, tc := range []struct {
		name, method, path, body, want string
	}{
		{"a body the sub-block's call does not take", "POST", "projects/p/zones/z/reservations/r/reservationBlocks/b/reservationSubBlocks/s/performMaintenance", `{"maintenanceScope":"ALL"}`, "takes no body"},
		{"a scope Compute Engine does not have", "POST", "projects/p/zones/z/reservations/r/reservationBlocks/b/performMaintenance", `{"maintenanceScope":"SOME"}`, "is none of"},
		{"a method that does not exist", "POST", "projects/p/zones/z/instances/i/repair", ``, "no method"},
	} {
		_, problems := d.Request(tc.method, tc.path, nil, []byte(tc.body))
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.name, problems, tc.want)
		}
	}
}

// TestReportRefusedAsComputeEngineRefuses: a report from a VM Compute
// Engine takes none from is an operation that fails with the documented
// code, and so is a second report while the first one's operation runs.
func TestReportRefusedAsComputeEngineRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gceemu.Config
		code string
	}{
		{"a G2", gceemu.Config{MachineType: "g2-standard-48"}, "MACHINE_TYPE_NOT_SUPPORTED"},
		{"on demand", gceemu.Config{ProvisioningModel: "STANDARD"}, "INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED"},
		{"stopped", gceemu.Config{Status: "TERMINATED"}, "INSTANCE_SHOULD_BE_RUNNING"},
	} {
		cfg := tc.cfg
		cfg.Project, cfg.Zone, cfg.Name = "p1", "us-east5-a", "gpu-0"
		emu := gceemu.StartT(t, cfg)
		t.Setenv("GCE_METADATA_HOST", emu.Host())
		m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emu.ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		inst := Instance{Project: "p1", Zone: "us-east5-a", Name: "gpu-0"}
		op, err := m.ReportHostAsFaulty(ctxT(t, 10*time.Second), inst, "req-1", "PERFORMANCE", "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := m.WaitOperation(ctxT(t, 10*time.Second), inst, op); !errors.Is(err, ErrOperationFailed) || !strings.Contains(err.Error(), tc.code) {
			t.Errorf("%s: %v; want the operation failed with %s", tc.name, err, tc.code)
		}
	}
	emu, m, inst := setup(t)
	emu.SetPerformMaintenanceDelay(time.Hour) // the first report's operation runs
	if _, err := m.ReportHostAsFaulty(ctxT(t, 10*time.Second), inst, "req-a", "PERFORMANCE", ""); err != nil {
		t.Fatal(err)
	}
	op, err := m.ReportHostAsFaulty(ctxT(t, 10*time.Second), inst, "req-b", "PERFORMANCE", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitOperation(ctxT(t, 10*time.Second), inst, op); !errors.Is(err, ErrOperationFailed) || !strings.Contains(err.Error(), "FAILED_WITH_UNEXPECTED_STATUS") {
		t.Errorf("a second report while the first runs: %v; want FAILED_WITH_UNEXPECTED_STATUS", err)
	}
}

// TestGroupCallOnlyWhereItFits: the VM's group call goes to its sub-block
// only where the sub-block is GROUPED and its hosts in use are the members
// the cluster drained; otherwise ErrGroupNotCallable says why, and nothing
// is called.
func TestGroupCallOnlyWhereItFits(t *testing.T) {
	emus, m := reservationVMs(t, "sub-1", "sub-1", "sub-1")
	vm := &VM{Maintainer: m, Metadata: gcemetadata.NewWithOptions(&gcemetadata.Options{Client: &http.Client{}})}
	calls := func() int { return len(emus[0].Calls()) }
	if _, err := vm.PerformGroupMaintenance(ctxT(t, 10*time.Second), "req-1", true, 2); !errors.Is(err, ErrGroupNotCallable) || !strings.Contains(err.Error(), "3 hosts in use") || calls() != 0 {
		t.Errorf("two members known of three in use: %v, %d calls; want ErrGroupNotCallable naming the 3 hosts, no call", err, calls())
	}
	emus[0].SetReservationScheduling("INDEPENDENT", false)
	if _, err := vm.PerformGroupMaintenance(ctxT(t, 10*time.Second), "req-2", true, 3); !errors.Is(err, ErrGroupNotCallable) || !strings.Contains(err.Error(), "INDEPENDENT") || calls() != 0 {
		t.Errorf("an INDEPENDENT sub-block: %v, %d calls; want ErrGroupNotCallable, no call", err, calls())
	}
	emus[0].SetReservationScheduling("GROUPED", false)
	if _, err := vm.PerformGroupMaintenance(ctxT(t, 10*time.Second), "req-3", true, 3); err != nil || calls() != 1 || emus[0].Calls()[0].Method != "reservationSubBlocks.performMaintenance" {
		t.Errorf("every member known: %v, calls %+v; want the sub-block's call", err, emus[0].Calls())
	}
	if _, err := vm.PerformGroupMaintenance(ctxT(t, 10*time.Second), "req-4", false, 3); err != nil || calls() != 2 || emus[0].Calls()[1].Scope != ScopeRunningVMs {
		t.Errorf("the block: %v, calls %+v; want the block's call with RUNNING_VMS", err, emus[0].Calls())
	}
}
