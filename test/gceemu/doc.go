// Package gceemu emulates, for one simulated Compute Engine VM, the parts of
// the GCE metadata server and the Compute Engine API that maintenance-handler
// uses. Tests and the demo start one Server per simulated instance on a
// loopback port and point the agent at it (GCE_METADATA_HOST and the Compute
// endpoint).
//
// What it serves, faithful to what docs/gce.md says Compute Engine does:
//
//   - /computeMetadata/v1/ with the Metadata-Flavor header contract: a request
//     without "Metadata-Flavor: Google" (or with X-Forwarded-For) gets 403;
//     every answer carries "Metadata-Flavor: Google" and an ETag of 16 hex
//     digits.
//   - Long polls: wait_for_change=true hangs until the value's ETag changes;
//     a last_etag that differs from the current ETag answers at once;
//     timeout_sec ends the hang with 200 and the unchanged value.
//   - instance/maintenance-event (NONE, MIGRATE_ON_HOST_MAINTENANCE,
//     TERMINATE_ON_HOST_MAINTENANCE, or anything a test sets),
//     instance/preempted (TRUE/FALSE), instance/upcoming-maintenance (the
//     notice as snake_case JSON; "nothing scheduled" as {}, as 503 with the
//     documented error body, as 404, or as NONE, chosen per instance),
//     instance/name, instance/zone, instance/id, instance/hostname,
//     instance/scheduling/*, project/project-id, project/numeric-project-id,
//     instance/service-accounts/default/{token,email} and instance/attributes/.
//   - POST /compute/v1/projects/{p}/zones/{z}/instances/{i}/performMaintenance:
//     checks the bearer token, records the call, answers with a zonal
//     Operation, and after a delay the test sets moves the notice from PENDING
//     to ONGOING and maintenance-event to TERMINATE_ON_HOST_MAINTENANCE. It
//     refuses with a Google-style error when nothing is pending or the notice
//     cannot be rescheduled. GET .../operations/{name} reports the operation.
//     Servers joined as one multi-host slice (JoinSlice) go into maintenance
//     together when one of them accepts a call.
//
// Every Compute API request it receives and every answer it gives is held
// to Google's discovery document of Compute Engine v1 (test/computeapi):
// a request the document does not allow is refused with a 400, and
// StartT and vms.ForTest fail the test on any problem either side has.
// Its instances.get answers in the real shapes: the reservation, block
// and sub-block in three fields of reservationConsumptionInfo, machine
// type, status and provisioning model, timestamps with milliseconds in US
// Pacific time.
//
// Faults: per path prefix, a number of 503s (or any status), hung requests,
// dropped connections and garbage bodies; ResetETags changes every ETag
// without changing a value, as a restarted metadata server would.
//
// What it does not do: it does not stop or restart anything. The simulated
// VM's reboot (a new boot ID on the Node) belongs to the test world.
//
// Concurrency: every method of Server is safe for concurrent use. Setters
// wake the long polls whose value changed.
package gceemu
