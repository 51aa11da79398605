package compute

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/protocol"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

// TestNodePoolFromTheVMLabels: instances.get's resource labels name the
// GKE node pool a VM was made for; a VM without GKE's label is in none,
// whatever its other labels say.
func TestNodePoolFromTheVMLabels(t *testing.T) {
	got := map[string]string{}
	for name, labels := range map[string]map[string]string{
		"gke-v5p-0": {"goog-k8s-cluster-name": "c1", protocol.VMResourceLabelNodePool: "v5p"},
		"own-vm-0":  {"team": "research"},
		"bare-vm-0": nil,
	} {
		emu := gceemu.StartT(t, gceemu.Config{Project: "p1", Zone: "us-east5-a", Name: name, MachineType: "ct5p-hightpu-4t", Labels: labels})
		t.Setenv("GCE_METADATA_HOST", emu.Host())
		m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emu.ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := m.Scheduling(ctxT(t, 10*time.Second), Instance{Project: "p1", Zone: "us-east5-a", Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = sc.NodePool
	}
	if d := cmp.Diff(map[string]string{"gke-v5p-0": "v5p", "own-vm-0": "", "bare-vm-0": ""}, got); d != "" {
		t.Errorf("the VMs' pools (-want +got):\n%s", d)
	}
}

// TestStopFactsFromInstancesGet: instances.get says what confirms a
// host's forced maintenance: its status (STOPPING once Compute Engine
// begins to stop a preempted VM), its last start, and its upcoming
// maintenance's status and window; a VM that does not exist is NotFound.
func TestStopFactsFromInstancesGet(t *testing.T) {
	emu := gceemu.StartT(t, gceemu.Config{Project: "p1", Zone: "us-east5-a", Name: "tpu-0", MachineType: "ct5p-hightpu-4t"})
	t.Setenv("GCE_METADATA_HOST", emu.Host())
	m, err := NewMaintainer(ctxT(t, 10*time.Second), Options{Endpoint: emu.ComputeEndpoint(), Backoff: backoff.Policy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	inst := Instance{Project: "p1", Zone: "us-east5-a", Name: "tpu-0"}
	read := func() Scheduling {
		t.Helper()
		sc, err := m.Scheduling(ctxT(t, 10*time.Second), inst)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	type stop struct {
		Status, Maintenance string
		Window, Started     bool
	}
	of := func(sc Scheduling) stop {
		return stop{sc.Status, sc.MaintenanceStatus, !sc.MaintenanceStart.IsZero(), !sc.LastStart.IsZero()}
	}
	if d := cmp.Diff(stop{Status: "RUNNING", Started: true}, of(read())); d != "" {
		t.Errorf("running, nothing scheduled (-want +got):\n%s", d)
	}
	start := time.Now().Add(30 * time.Minute).UTC().Truncate(time.Second)
	emu.ScheduleNotice(gceemu.ScheduledNotice(start, time.Hour))
	sc := read()
	if d := cmp.Diff(stop{Status: "RUNNING", Maintenance: "PENDING", Window: true, Started: true}, of(sc)); d != "" || !sc.MaintenanceStart.Equal(start) {
		t.Errorf("a maintenance scheduled at %s (-want +got):\n%s (window %s)", start, d, sc.MaintenanceStart)
	}
	emu.SetPreempted(true)
	if got := read().Status; got != "STOPPING" {
		t.Errorf("preempted: status %s, want STOPPING", got)
	}
	_, err = m.Scheduling(ctxT(t, 10*time.Second), Instance{Project: "p1", Zone: "us-east5-a", Name: "no-such-vm"})
	if !NotFound(err) {
		t.Errorf("a VM that does not exist: %v, want NotFound", err)
	}
}
