// Package lifecycle is one node's maintenance lifecycle as a pure state
// machine: Step(config, state, observation) returns the next state and
// what to do. The agent's loop around it only observes (metadata signals,
// the Node, the drain's progress) and executes (one patch of the Node per
// decision, Events, metrics, the drain, the workload notice on the pods).
// The state lives on the Node (package protocol encodes it), so an agent
// killed at any point and restarted continues from the Node alone. Each
// kind of maintenance is a file: host.go (host maintenance and the open
// window), preemption.go, manual.go (the perform-maintenance sub-machine,
// manualcheck.go its acceptance check, failures.go its failure memory),
// slice.go and slicehosts.go (a group: a multi-host slice, a gang or a
// reservation block or sub-block, and the rules the agent and the
// aggregator share, Believed among them: only a proven member whose start
// is not in the future moves the others),
// fault.go (a fault's repair), knownend.go (a VM whose end is known),
// gke.go (GKE's own handler), back.go (back in service and counting),
// notice.go (the notice and the node conditions), workload.go (what the
// pods are told); step.go holds the frame and the order of the
// sub-steps. What a step reads is decoded in one place from what the
// agent fetched (fetched.go: ObservationOf); pods.go says which pods keep
// a node busy, and since when it is idle.
//
// Lifecycle of one node:
//
//	Idle ──(TERMINATE_ON_HOST_MAINTENANCE, preempted TRUE)──▶ Draining
//	Idle ──(notice ONGOING, where maintenance-event is not served: TPU)──▶ Draining
//	Idle ──(perform-maintenance=true, notice PENDING and can_reschedule)──▶ Draining (manual)
//	Idle ──(the slice's ask: another host of the slice stops)──▶ Draining (slice)
//	Idle ──(KnownEndLead before the VM's known end)──▶ Draining (known end)
//	Draining ──(drain finished)──▶ Terminating
//	Draining (manual) ──(drain finished, performMaintenance accepted)──▶ Terminating
//	Draining (manual) ──(performMaintenance failed)──▶ Idle
//	Draining, Terminating ──(new boot ID: the VM stopped and came back)──▶ Idle
//	Draining, Terminating ──(every signal cleared, same boot: cancelled)──▶ Idle
//	Draining, Terminating (slice) ──(the ask is withdrawn)──▶ Idle
//
//	| phase       | active-node-maintenance | taint | cordoned          |
//	|-------------|-------------------------|-------|-------------------|
//	| Idle        | (none)                  | no    | as a person left it |
//	| Draining    | ONGOING                 | yes   | yes               |
//	| Terminating | terminating             | yes   | yes               |
//
// In every phase a pending notice is mirrored: the scheduled-maintenance-time
// label (Unix seconds of the window start) and the upcoming-maintenance
// annotation (the notice as served). MIGRATE_ON_HOST_MAINTENANCE is recorded
// and changes nothing else. A signal the metadata server has not answered,
// or answered with a value the parser did not recognise, is unknown: unknown
// never starts a drain and never clears anything.
//
// Returning to Idle uncordons the node unless it was already cordoned when
// maintenance started (protocol.AnnotationCordonedBefore).
//
// Interruptions are counted on the Node (protocol.AnnotationInterruptions)
// once each: a host maintenance or preemption when it starts, a manual one
// when Compute Engine is seen to begin it (or the VM comes back from it), a
// reboot nothing announced when the node comes back; a slice's drain is not
// (the host that stops counts itself). The VM's own maintenance or
// preemption takes over a slice's drain or a manual drain not yet asked
// for, and is counted then. A drain's deadline counts the platform's notice
// from when the signal appeared (stopAt).
//
// Where GKE's own maintenance handler is seen handling the node, a
// maintenance is left to it (leaveToGKE): recorded and counted, never
// drained, cordoned or asked for; the notice keys are removed only if the
// agent mirrored them.
//
// The workload notice (WorkloadTargetOf) follows the state: every pod is told
// the pending window, and, once the maintenance starts, when it will be
// asked to stop.
//
// The manual trigger (protocol.LabelPerformMaintenance, set by a person or the
// aggregator) is read, never acted on blindly:
//   - accepted only as "true", only with a notice that is PENDING and
//     can_reschedule, and only while the node is Idle; anything else is a
//     Warning Event and the label is removed, with no other change;
//   - a manual maintenance drains by the host-maintenance policy with the
//     manual-drain deadline, then asks Compute Engine once (RequestID, kept
//     on the Node, makes a retried call idempotent; Requested, written
//     before the call, stops a restarted agent from calling again once the
//     signals show the call was accepted);
//   - once accepted it runs to its end here: the label set again is a
//     no-op, removing it stops no drain (Compute Engine may have been
//     asked), another value is answered and removed; where the aggregator
//     makes the calls, it makes a voluntary one only while the label
//     stands, so a call not yet made when the label goes is refused and
//     the node goes back in service as after a failed call;
//   - a real TERMINATE_ON_HOST_MAINTENANCE, ONGOING notice or preemption
//     before the call turns it into that maintenance, with no call (the
//     RequestID stays: the label started it);
//   - a failed call puts the node back in service; the label goes when the
//     node is back in service, whichever way.
//
// The node's Compute Engine call (State.Call, call.go) is part of its
// state, not of a maintenance: whatever maintenance takes another over,
// is withdrawn, ends or comes back, the record stays until the call is
// refused, its operation ends, the VM stops, or two ReportTimeouts pass.
// Every call site asks mayCall: no call is made while another is
// outstanding (a retry of the same request ID is the same request); a
// repair that would report follows a report whose operation still runs,
// and otherwise waits for the outstanding call's answer or bound.
//
// The invariants the model test (model_test.go) checks after every pass
// of thousands of random histories, each with what it protects for users:
//   - one report per fault: no second reportHostAsFaulty while the
//     operation of an earlier one runs (Compute Engine refuses it and may
//     leave the VM in REPAIRING), and at most one performMaintenance
//     request ID per maintenance (no maintenance started twice);
//   - a maintenance the VM announces is never missed: the node is never
//     idle while TERMINATE_ON_HOST_MAINTENANCE or a preemption is served,
//     nor within the lead of the VM's known end;
//   - no drain past the VM's stop: a drain's deadline never falls after
//     the VM's known end;
//   - no drain on nothing: a node leaves Idle only on a signal the agent
//     understood (a served maintenance or preemption, a TPU's ONGOING
//     notice, an accepted trigger, the slice's ask, an approved repair,
//     the known end's lead);
//   - no call without a maintenance under way that may make it: none
//     while the node's multi-host slice cannot be told or its other hosts
//     still drain for it, none and no voluntary drain while the slice
//     stops by force (which records no failure either), none for a
//     repair GKE's flow makes;
//   - a repair is given its documented time: a report Compute Engine
//     carries out in its documented time is not given up on, a repair is
//     recorded done only when asked for (or after a report that was
//     outstanding), and GKE's fault-behavior label is not left behind by a
//     repair that failed;
//   - each interruption counted once;
//   - a person's request kept: a person's cordon is never removed, the
//     agent's own never left behind once idle;
//   - what is said is true: no EvictionComplete while the drain left pods;
//     the taint is on exactly while a maintenance is under way;
//   - the agent comes to rest: its passes stop changing the Node, and
//     after a reboot and quiet signals every history ends Idle, in
//     service unless a person cordoned it.
//
// What it does not do: talk to the API server, the metadata server or
// Compute Engine, read a clock, or decide about other nodes (package fleet
// does, for the aggregator). It imports the Kubernetes API types and the
// project's wire packages (protocol, metadata) only; a test holds that.
//
// Concurrency: pure functions over values; safe for concurrent use.
package lifecycle
