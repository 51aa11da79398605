package compute

import (
	"strings"
	"testing"
	"time"

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
	if err := m.WaitOperation(ctx, inst, op); err != nil {
		t.Fatal(err)
	}
	emu.SetOperationFailure("the host could not be maintained")
	op, err = m.ReportHostAsFaulty(ctx, inst, "req-2", "UNRECOVERABLE_GPU_ERROR", "XID 79")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WaitOperation(ctx, inst, op); err == nil {
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
