// Package agent is the node-local half of maintenance-handler: it keeps its
// own Node's labels, taint and annotations true to what the VM's metadata
// server says, drains the node before the VM stops, and puts it back in
// service when the VM returns. On the perform-maintenance label it drains
// the node and then asks Compute Engine to start the pending maintenance
// now (through Maintainer, once per maintenance).
//
// The Node protocol (every key the agent reads or writes, and how its state
// is encoded there) is package protocol;
// the state machine is the pure function Step in state.go, whose file header
// documents the lifecycle. Everything the agent needs to continue after a
// restart lives on the Node.
//
// What it does not do: it never touches another Node, never decides about
// other nodes (that is the aggregator's), and never acts on a metadata value
// it does not recognise.
package agent
