package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/maintenance-handler/maintenance-handler/compute"
)

// TestNoticeOnlyWhereItExists: a preemption notice exists only on a Spot
// VM. A duration given applies where the metadata server says the VM is
// preemptible, and not where instances.get, when the known end has it
// read, names another provisioning model; auto takes the VM's own notice;
// a VM that is not preemptible has none, whatever is given.
func TestNoticeOnlyWhereItExists(t *testing.T) {
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		notice      string
		knownEnd    string
		preemptible bool
		model       string
		vmNotice    time.Duration
		want        time.Duration
		read        bool // instances.get read
	}{
		{"a duration on a standard VM: none", "120s", knownEndNone, false, "STANDARD", 0, 0, false},
		{"a duration on a Spot VM", "120s", knownEndNone, true, "SPOT", 0, 120 * time.Second, false},
		{"a duration on a reservation-bound VM whose instances.get is read: none", "120s", knownEndAuto, false, "RESERVATION_BOUND", 0, 0, true},
		{"a duration where instances.get names a flex-start VM: none", "120s", knownEndAuto, true, "FLEX_START", 0, 0, true},
		{"a duration where instances.get says Spot", "120s", knownEndAuto, true, "SPOT", 0, 120 * time.Second, true},
		{"auto on a Spot VM: its own notice", preemptionNoticeAuto, knownEndNone, true, "SPOT", 90 * time.Second, 90 * time.Second, true},
		{"auto on a standard VM: none, and no read", preemptionNoticeAuto, knownEndNone, false, "STANDARD", 0, 0, false},
		{"none: none", preemptionNoticeNone, knownEndNone, true, "SPOT", 90 * time.Second, 0, false},
	} {
		opts := &Options{PreemptionNotice: tc.notice, KnownEnd: tc.knownEnd}
		read := false
		got, err := readSchedule(context.Background(), opts, metadataOf(tc.preemptible, "TERMINATE"),
			func(context.Context) (compute.Scheduling, error) {
				read = true
				return compute.Scheduling{Spot: tc.model == "SPOT", ProvisioningModel: tc.model, PreemptionNotice: tc.vmNotice, End: end}, nil
			})
		if err != nil || got.PreemptionNotice != tc.want || read != tc.read || got.LiveMigrates {
			t.Errorf("%s: notice %s (instances.get read %t), %v; want %s (read %t)", tc.name, got.PreemptionNotice, read, err, tc.want, tc.read)
		}
	}
}

// TestLiveMigratesFromTheMetadataServer: the VM live-migrates only where the
// metadata server says MIGRATE; TERMINATE, a value not understood, or none
// is a VM that stops, drained for as before. It is read whatever the
// flags, and needs no instances.get.
func TestLiveMigratesFromTheMetadataServer(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   bool
	}{{"MIGRATE", true}, {"TERMINATE", false}, {"migrate", false}, {"", false}} {
		opts := &Options{PreemptionNotice: preemptionNoticeNone, KnownEnd: knownEndNone}
		got, err := readSchedule(context.Background(), opts, metadataOf(false, tc.policy),
			func(context.Context) (compute.Scheduling, error) {
				t.Fatal("instances.get read")
				return compute.Scheduling{}, nil
			})
		if err != nil || got.LiveMigrates != tc.want {
			t.Errorf("on-host-maintenance %q: live-migrates %t, %v; want %t", tc.policy, got.LiveMigrates, err, tc.want)
		}
	}
}

// metadataOf answers the metadata keys readSchedule reads.
func metadataOf(preemptible bool, onHostMaintenance string) func(context.Context, string) (string, error) {
	return func(_ context.Context, key string) (string, error) {
		switch key {
		case "instance/scheduling/preemptible":
			if preemptible {
				return "TRUE", nil
			}
			return "FALSE", nil
		case "instance/scheduling/on-host-maintenance":
			return onHostMaintenance, nil
		}
		return "", fmt.Errorf("unexpected key %s", key)
	}
}
