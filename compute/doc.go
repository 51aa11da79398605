// Package compute asks Compute Engine to start a VM's pending maintenance
// now (instances.performMaintenance) and follows the zonal Operation it
// returns (zoneOperations.get): two REST calls with net/http and an OAuth
// token from the VM's service account (golang.org/x/oauth2/google, via the
// metadata server). The generated client google.golang.org/api/compute/v1
// did the same with its transport, gRPC and telemetry dependencies; without
// it the stripped agent binary went from 65.7 MB to 29.7 MB.
//
// Transient failures (429, 5xx, transport errors) are retried with
// exponential backoff and jitter until the caller's context ends, sending the
// same requestId each time so that Compute Engine applies a retried call
// once. A refusal (400, 404) is returned at once. Permission denied (403),
// on either call, is ErrPermissionDenied at once, with a message that names
// the missing permission and the service account. Methods lists both calls
// and their permissions.
//
// VM is the agent's view: its own VM, identified when first needed from the
// metadata server (project, zone, name, service account email), else from
// the Node's spec.providerID.
//
// It also reads a VM's own instances.get (its Spot notice, its known end,
// the reservation, block and sub-block it consumes, and whether Compute
// Engine would take a report of its host) and a reservation's blocks and
// sub-blocks, and starts a reservation group's maintenance.
//
// What it does not do: decide whether to call (the agent checks that the
// notice is pending and reschedulable) or remember that it called (the
// agent records that on the Node).
//
// Concurrency: a Maintainer may be used from several goroutines.
package compute
