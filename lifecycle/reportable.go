package lifecycle

// Which VMs Compute Engine takes a faulty-host report from. Google's
// "Report faulty host" page (AI Hypercomputer documentation) and
// "Troubleshoot the faulty host API": only a RUNNING VM
// (INSTANCE_SHOULD_BE_RUNNING), of the A4X Max, A4X, A4, A3 Ultra, A3 Mega
// or A3 High (8 GPU) machine types (MACHINE_TYPE_NOT_SUPPORTED), that uses
// the reservation-bound provisioning model
// (INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED: a flex-start or Spot VM of
// those types needs the account team). Any other VM's fault is not drained
// for a report that cannot come.

import (
	"fmt"
	"strings"
)

// ReportableView is what the agent knows of whether its VM can be
// reported as faulty.
type ReportableView struct {
	// ReportableKnown: the agent read the VM's instances.get; NotReportable
	// then says why Compute Engine would refuse a report from it ("" when
	// it would take one).
	ReportableKnown bool
	NotReportable   string
}

// reportableMachinePrefixes are the machine types Compute Engine takes a
// report from: A4X Max and A4X (a4x-), A4 (a4-), A3 Ultra (a3-ultragpu-),
// A3 Mega (a3-megagpu-); A3 High only with 8 GPUs (a3-highgpu-8g).
var reportableMachinePrefixes = []string{"a4x-", "a4-", "a3-ultragpu-", "a3-megagpu-", "a3-highgpu-8g"}

// NotReportable says why Compute Engine refuses a faulty-host report from
// a VM of machineType, provisioningModel (instances.get's
// scheduling.provisioningModel; "" when not given) and status that
// consumes a reservation (reserved) or not; "" when it takes one.
func NotReportable(machineType, provisioningModel, status string, reserved bool) string {
	var why []string
	if status != "RUNNING" {
		why = append(why, fmt.Sprintf("it is %s, not RUNNING", status))
	}
	ok := false
	for _, p := range reportableMachinePrefixes {
		if strings.HasPrefix(machineType, p) {
			ok = true
		}
	}
	if !ok {
		why = append(why, fmt.Sprintf("its machine type %s is none of A4X Max, A4X, A4, A3 Ultra, A3 Mega and A3 High (8 GPU)", machineType))
	}
	switch {
	case provisioningModel == "RESERVATION_BOUND":
	case provisioningModel == "SPOT" || provisioningModel == "FLEX_START":
		why = append(why, fmt.Sprintf("its provisioning model is %s, not reservation-bound", provisioningModel))
	case !reserved:
		why = append(why, "it consumes no reservation")
	}
	if len(why) == 0 {
		return ""
	}
	return "Compute Engine takes faulty-host reports only from RUNNING, reservation-bound VMs of those machine types, and " + strings.Join(why, "; ")
}
