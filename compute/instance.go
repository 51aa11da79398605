package compute

// What the agent reads of its own VM with instances.get (itself, or through
// the aggregator): a Spot VM's preemption notice, the VM's known end, and
// what proves its group membership (its machine type and GKE node pool,
// the reservation it consumes, the block, sub-block and host it runs on).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// durationJSON is a google.protobuf.Duration as the Compute API's JSON
// spells it: seconds as a string (an int64), nanos as a number.
type durationJSON struct {
	Seconds json.Number `json:"seconds"`
	Nanos   int64       `json:"nanos"`
}

// Scheduling is what the agent reads of its VM with instances.get: the
// preemption notice of a Spot VM, and the VM's known end.
type Scheduling struct {
	// Spot: the VM is a Spot (or preemptible) VM, and PreemptionNotice
	// its scheduling.preemptionNoticeDuration (zero when it has none).
	Spot             bool
	PreemptionNotice time.Duration
	// End is resourceStatus.scheduling.terminationTimestamp: when Compute
	// Engine terminates the VM for its time limit (zero: it has none).
	// EndCause says which limit and what Compute Engine does then, for
	// people.
	End      time.Time
	EndCause string
	// Consumption is what the VM consumes of a reservation
	// (resourceStatus.reservationConsumptionInfo; empty for none):
	// Consumption.Group reads its block and sub-block.
	Consumption Consumption
	// Topology is where the VM runs (resourceStatus.physicalHostTopology;
	// empty where Compute Engine names none): the IDs GKE's
	// gce-topology-* labels mirror.
	Topology PhysicalTopology
	// MachineType is the VM's machine type's name (a3-highgpu-8g),
	// ProvisioningModel its scheduling.provisioningModel (STANDARD, SPOT,
	// FLEX_START, RESERVATION_BOUND; "" when not given) and Status its
	// status (RUNNING, REPAIRING, ...).
	MachineType, ProvisioningModel, Status string
	// NodePool is the GKE node pool the VM belongs to: the value of its
	// protocol.VMResourceLabelNodePool resource label (the instance's
	// labels map), "" when it carries none (no GKE node).
	NodePool string
	// LastStart is the VM's lastStartTimestamp (zero when not given), and
	// MaintenanceStatus and MaintenanceStart its
	// resourceStatus.upcomingMaintenance's maintenanceStatus (PENDING,
	// ONGOING) and windowStartTime ("" and zero for none): what the
	// aggregator confirms a host's forced maintenance by
	// (lifecycle.ConfirmsCause).
	LastStart         time.Time
	MaintenanceStatus string
	MaintenanceStart  time.Time
}

// Consumption is a VM's resourceStatus.reservationConsumptionInfo: the
// full resource names of the reservation, the reservation block and the
// sub-block it consumes, each in a field of its own ("" where it names
// none).
type Consumption struct {
	Reservation string `json:"consumedReservation"`
	Block       string `json:"consumedReservationBlock"`
	SubBlock    string `json:"consumedReservationSubBlock"`
}

// PhysicalTopology is a VM's resourceStatus.physicalHostTopology: the
// IDs of the block, the sub-block and the host it runs on (the Compute
// Engine v1 API description: "the ID of the block, sub-block, and host on
// which the running instance is located").
type PhysicalTopology struct {
	Block    string `json:"block"`
	Subblock string `json:"subblock"`
	Host     string `json:"host"`
}

// Scheduling reads inst's scheduling with instances.get. A 403 is
// ErrPermissionDenied naming GetPermission.
func (m *Maintainer) Scheduling(ctx context.Context, inst Instance) (Scheduling, error) {
	return m.scheduling(ctx, inst, "")
}

// instanceJSON is what the agent reads of an instances.get answer.
type instanceJSON struct {
	Scheduling struct {
		Preemptible               bool          `json:"preemptible"`
		ProvisioningModel         string        `json:"provisioningModel"`
		PreemptionNoticeDuration  *durationJSON `json:"preemptionNoticeDuration"`
		MaxRunDuration            *durationJSON `json:"maxRunDuration"`
		TerminationTime           string        `json:"terminationTime"`
		InstanceTerminationAction string        `json:"instanceTerminationAction"`
	} `json:"scheduling"`
	MachineType        string            `json:"machineType"`
	Status             string            `json:"status"`
	LastStartTimestamp string            `json:"lastStartTimestamp"`
	Labels             map[string]string `json:"labels"`
	ResourceStatus     struct {
		Scheduling struct {
			TerminationTimestamp string `json:"terminationTimestamp"`
		} `json:"scheduling"`
		ReservationConsumptionInfo Consumption      `json:"reservationConsumptionInfo"`
		PhysicalHostTopology       PhysicalTopology `json:"physicalHostTopology"`
		UpcomingMaintenance        struct {
			MaintenanceStatus string `json:"maintenanceStatus"`
			WindowStartTime   string `json:"windowStartTime"`
		} `json:"upcomingMaintenance"`
	} `json:"resourceStatus"`
}

func (m *Maintainer) scheduling(ctx context.Context, inst Instance, account string) (Scheduling, error) {
	var got instanceJSON
	if err := m.get(ctx, instancePath(inst), GetPermission, account, &got); err != nil {
		return Scheduling{}, fmt.Errorf("instances.get on %s: %w", inst, err)
	}
	sc := got.Scheduling
	out := Scheduling{Spot: sc.Preemptible || sc.ProvisioningModel == "SPOT", Consumption: got.ResourceStatus.ReservationConsumptionInfo,
		Topology: got.ResourceStatus.PhysicalHostTopology, MachineType: lastSegment(got.MachineType), ProvisioningModel: sc.ProvisioningModel, Status: got.Status,
		NodePool: got.Labels[protocol.VMResourceLabelNodePool]}
	var err error
	upcoming := got.ResourceStatus.UpcomingMaintenance
	out.MaintenanceStatus = upcoming.MaintenanceStatus
	for _, ts := range []struct {
		raw  string
		into *time.Time
		what string
	}{{got.LastStartTimestamp, &out.LastStart, "lastStartTimestamp"}, {upcoming.WindowStartTime, &out.MaintenanceStart, "upcomingMaintenance.windowStartTime"}} {
		if ts.raw == "" {
			continue
		}
		if *ts.into, err = time.Parse(time.RFC3339Nano, ts.raw); err != nil {
			return Scheduling{}, fmt.Errorf("instances.get on %s: %s %q is not a time: %w", inst, ts.what, ts.raw, err)
		}
	}
	if end := got.ResourceStatus.Scheduling.TerminationTimestamp; end != "" {
		if out.End, err = time.Parse(time.RFC3339Nano, end); err != nil {
			return Scheduling{}, fmt.Errorf("instances.get on %s: terminationTimestamp %q is not a time: %w", inst, end, err)
		}
		out.EndCause = endCause(got)
	}
	if !out.Spot || sc.PreemptionNoticeDuration == nil {
		return out, nil
	}
	if out.PreemptionNotice, err = sc.PreemptionNoticeDuration.duration(time.Hour); err != nil {
		return Scheduling{}, fmt.Errorf("instances.get on %s: preemptionNoticeDuration: %w", inst, err)
	}
	return out, nil
}

// NotFound says whether err is Compute Engine's 404: the resource read
// does not exist.
func NotFound(err error) bool {
	var aerr *apiError
	return errors.As(err, &aerr) && aerr.Code == http.StatusNotFound
}

// lastSegment is the last segment of a resource's URL or name.
func lastSegment(s string) string { return s[strings.LastIndex(s, "/")+1:] }

// endCause says which time limit ends the VM, and what Compute Engine
// does then.
func endCause(got instanceJSON) string {
	sc, what := got.Scheduling, "a time limit"
	switch {
	case sc.MaxRunDuration != nil:
		what = "maxRunDuration " + string(sc.MaxRunDuration.Seconds) + "s"
	case sc.TerminationTime != "":
		what = "terminationTime " + sc.TerminationTime
	}
	if sc.ProvisioningModel == "FLEX_START" {
		what = "a flex-start VM, " + what
	}
	action := "stops"
	if sc.InstanceTerminationAction == "DELETE" {
		action = "deletes"
	}
	return what + "; Compute Engine " + action + " the VM then"
}

// duration reads d, which must lie between 0 and most.
func (d durationJSON) duration(most time.Duration) (time.Duration, error) {
	secs, err := d.Seconds.Int64()
	if err != nil || secs < 0 || time.Duration(secs)*time.Second > most {
		return 0, fmt.Errorf("%q is not a duration this agent believes", d.Seconds)
	}
	return time.Duration(secs)*time.Second + time.Duration(d.Nanos), nil
}

// get reads path, which needs permission, into into, retrying a
// network error, a 401 (a token that expired in flight), a 429 or a 5xx
// until ctx ends; a 403 is ErrPermissionDenied naming permission and
// account ("": Options.ServiceAccount).
func (m *Maintainer) get(ctx context.Context, path, permission, account string, into any) error {
	if account == "" {
		account = m.opts.ServiceAccount
	}
	for attempt := 1; ; attempt++ {
		err := m.getJSON(ctx, path, into)
		if err == nil {
			return nil
		}
		var aerr *apiError
		switch {
		case isForbidden(err):
			return fmt.Errorf("%w: %s lacks the IAM permission %s: %v", ErrPermissionDenied, account, permission, err)
		case errors.As(err, &aerr) && aerr.Code != http.StatusTooManyRequests && aerr.Code < 500 && aerr.Code != http.StatusUnauthorized:
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		if err := m.sleep(ctx, m.opts.Backoff.Delay(attempt)); err != nil {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
	}
}

// getJSON reads path from the Compute API into into.
func (m *Maintainer) getJSON(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.endpoint+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{Code: resp.StatusCode, Message: strings.TrimSpace(string(body))}
	}
	return json.Unmarshal(body, into)
}
