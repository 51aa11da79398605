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
