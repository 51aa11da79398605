package aggregator

// Where the cluster's VMs run: the relay calls Compute Engine only on a
// VM of the aggregator's own project, in a zone of the cluster's regions.
// A Node's spec.providerID is written by its kubelet (free when it
// registers the Node), so the VM it names is the node's word: the name
// must be the Node's own (instanceOf), and the project and the region must
// be what the aggregator itself was told, never what a node says.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/maintenance-handler/maintenance-handler/compute"
)

// Home is the project and the regions of the cluster's VMs, as the
// aggregator knows them (its flags, else the metadata server of the VM it
// runs on). The zero Home holds no VM: the relay then makes no call.
type Home struct {
	// Project is the project ID of the cluster's VMs.
	Project string
	// Regions are the regions of the cluster's zones, such as us-central1.
	Regions []string
}

// RegionOf is the region of a Compute Engine zone: a zone's name is its
// region's and a letter, such as us-central1-a in us-central1 (Google's
// "Regions and zones" page, cloud.google.com/compute/docs/regions-zones).
// A name that does not end in a dash and one letter is no zone: "".
func RegionOf(zone string) string {
	i := strings.LastIndex(zone, "-")
	if i <= 0 || i != len(zone)-2 || zone[i+1] < 'a' || zone[i+1] > 'z' {
		return ""
	}
	return zone[:i]
}

// holds says why inst is not one of the cluster's VMs (nil: it is).
func (h Home) holds(inst compute.Instance) error {
	if h.Project == "" || len(h.Regions) == 0 {
		return fmt.Errorf("the aggregator knows no project or region of its own (--project, --regions), so it calls on no VM such as %s", inst)
	}
	if inst.Project != h.Project {
		return fmt.Errorf("the VM %s is in project %s, not the cluster's %s", inst, inst.Project, h.Project)
	}
	if r := RegionOf(inst.Zone); r == "" || !slices.Contains(h.Regions, r) {
		return fmt.Errorf("the VM %s is in zone %s, in none of the cluster's regions (%s)", inst, inst.Zone, strings.Join(h.Regions, ", "))
	}
	return nil
}
