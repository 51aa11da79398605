// Package agent is the node-local half of maintenance-handler: it keeps its
// own Node's labels, taint and annotations true to what the VM's metadata
// server says, drains the node before the VM stops, and puts it back in
// service when the VM returns. On the perform-maintenance label it drains
// the node and then asks Compute Engine to start the pending maintenance
// now (through Maintainer, once per maintenance: by default Relay, which
// asks the aggregator through the Node, relay.go).
//
// The Node protocol (every key the agent reads or writes, how its state is
// encoded there, the Event reasons) is package protocol. The rules are
// package lifecycle: the pure state machine Step, one file per kind of
// maintenance. This package is the runtime around it (agent.go): it
// fetches what a step reads, which lifecycle.ObservationOf decodes into
// one observation (node.go), and executes: Node writes (node.go), the
// drain (draining.go), the performMaintenance call (perform.go), the
// workload notice on every pod of the node (workload.go), the
// ResourceClaims that make a pod accelerator work (claims.go), the
// metadata watch's health (health.go), the watch of its group's Nodes (a
// multi-host slice's or a gang's: slice.go), and observe-only, where its
// writes are kept on a Lease instead and nothing is drained or called
// (observe.go). Everything the agent needs to continue after a restart
// lives on the Node (an observed node's, on its Lease).
//
// What it does not do: it never touches another Node or another node's
// pods, never decides about other nodes (that is the aggregator's), and
// never acts on a metadata value it does not recognise.
//
// Concurrency: one goroutine steps the state machine and writes the Node;
// one per metadata key watches it, one writes the workload notice, and the
// drain and the performMaintenance call run in goroutines of their own,
// started and stopped by the loop; Start returns once all have ended.
package agent
