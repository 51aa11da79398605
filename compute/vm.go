package compute

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
)

// VM is the performMaintenance of one VM, the one the agent runs on. Its
// identity is read when first needed (not at start-up, where a slow
// metadata server would delay the agent): project, zone and name from the
// metadata server, else from the Node's spec.providerID; the service
// account's email from the metadata server, for error messages.
type VM struct {
	Maintainer *Maintainer
	Metadata   *gcemetadata.Client
	// ProviderID is the Node's spec.providerID (gce://project/zone/name),
	// used when the metadata server cannot tell.
	ProviderID string

	mu       sync.Mutex
	inst     Instance
	resolved bool
	account  string
}

// PerformMaintenance asks Compute Engine to start the VM's pending
// maintenance now (see Maintainer.PerformMaintenance).
func (v *VM) PerformMaintenance(ctx context.Context, requestID string) (string, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return "", err
	}
	return v.Maintainer.perform(ctx, inst, requestID, account)
}

// ReportHostAsFaulty reports the VM's host as faulty (see
// Maintainer.ReportHostAsFaulty).
func (v *VM) ReportHostAsFaulty(ctx context.Context, requestID, behavior, description string) (string, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return "", err
	}
	return v.Maintainer.report(ctx, inst, requestID, behavior, description, account)
}

// Scheduling reads the VM's scheduling (see Maintainer.Scheduling).
func (v *VM) Scheduling(ctx context.Context) (Scheduling, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return Scheduling{}, err
	}
	return v.Maintainer.scheduling(ctx, inst, account)
}

// WaitOperation waits for the VM's operation name to end (see
// Maintainer.WaitOperation).
func (v *VM) WaitOperation(ctx context.Context, name string) (time.Time, error) {
	inst, account, err := v.identity(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return v.Maintainer.waitOperation(ctx, inst, name, account)
}

func (v *VM) identity(ctx context.Context) (Instance, string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.resolved {
		inst, err := InstanceFromMetadata(ctx, v.Metadata)
		if err != nil {
			var perr error
			if inst, perr = InstanceFromProviderID(v.ProviderID); perr != nil {
				return Instance{}, "", fmt.Errorf("identify this VM: %w; and %w", err, perr)
			}
		}
		v.inst, v.resolved = inst, true
	}
	if v.account == "" {
		if email, err := v.Metadata.GetWithContext(ctx, "instance/service-accounts/default/email"); err == nil {
			v.account = "service account " + strings.TrimSpace(email)
		}
	}
	return v.inst, v.account, nil
}
