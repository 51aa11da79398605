package aggregator

import (
	"slices"
	"testing"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

func TestParseAutoscalerStatus(t *testing.T) {
	const yamlStatus = `time: 2026-11-23 07:00:00.000000 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
nodeGroups:
- name: https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-c-a3-1a2b3c4d-grp
  health:
    status: Healthy
    nodeCounts: {registered: {total: 2, ready: 2}}
    cloudProviderTarget: 2
    minSize: 0
    maxSize: 8
- name: https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b/instanceGroups/gke-c-a3-5e6f7a8b-grp
  health: {status: Healthy}
`
	const textStatus = `Cluster-autoscaler status at 2024-05-01 10:00:00.000000 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3 longUnregistered=0)
               LastProbeTime:      2024-05-01 10:00:00 +0000 UTC
  ScaleUp:     NoActivity (ready=3 registered=3)
NodeGroups:
  Name:        https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-c-l4-9c0d1e2f-grp
  Health:      Healthy (ready=1 unready=0 notStarted=0 longNotStarted=0 registered=1 longUnregistered=0 cloudProviderTarget=1 (minSize=0, maxSize=4))
  ScaleUp:     NoActivity (ready=1 cloudProviderTarget=1)

  Name:        gke-c-t4-3a4b5c6d-grp
  Health:      Healthy (ready=0 unready=0 cloudProviderTarget=0 (minSize=0, maxSize=2))
`
	for _, tc := range []struct {
		name, status string
		want         []string
	}{
		{"yaml", yamlStatus, []string{
			"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-c-a3-1a2b3c4d-grp",
			"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b/instanceGroups/gke-c-a3-5e6f7a8b-grp",
		}},
		{"text", textStatus, []string{
			"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroups/gke-c-l4-9c0d1e2f-grp",
			"gke-c-t4-3a4b5c6d-grp",
		}},
		{"empty", "", nil},
		{"garbage", "{{{ not a status", nil},
	} {
		if got := ParseAutoscalerStatus(tc.status); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestNodeGroupOf(t *testing.T) {
	groups := []string{
		"https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-c-a3-1a2b3c4d-grp",
		"gke-c-a3-1a2b3c4d-extra-grp",
		"https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/",
	}
	for node, want := range map[string]string{
		"gke-c-a3-1a2b3c4d-x7k2":       groups[0],
		"gke-c-a3-1a2b3c4d-extra-9q8w": groups[1], // the longest match
		"gke-c-a3-5e6f7a8b-x7k2":       "",
		"gke-c-a3-1a2b3c4d":            "",
	} {
		if got := fleet.NodeGroupOf(node, groups); got != want {
			t.Errorf("fleet.NodeGroupOf(%s) = %q, want %q", node, got, want)
		}
	}
}
