// Package protocol is the Node protocol: every label, annotation and taint
// the project reads or writes on a Node (and the pod annotation it reads),
// their value vocabularies, the interruption taxonomy, and the encoding of
// each component's state on a Node.
//
// The Node object is the only state the agent and the aggregator share:
// every decision either makes can be made again from what is on the Nodes,
// so a restarted agent or a new leader continues where the last one was.
// Each key has one writer (Keys says which, and who reads it): the agent
// writes its own Node's maintenance state and interruption counts, the
// aggregator writes the opportunistic trigger and the repairs it counts.
// A request that another writes (the perform-maintenance label, set by a
// person or the aggregator) is consumed by the agent: it removes it once it
// has answered it.
//
// Keys GKE users already know keep their exact strings; everything else
// lives under Prefix.
//
// What it does not do: talk to the API server, decide anything, or know
// about pods beyond the one annotation it names. It imports only the
// Kubernetes API types and package metadata (the notice's format).
//
// Concurrency: constants, pure functions and functions that change only
// the Node passed in; safe for concurrent use on distinct Nodes.
package protocol
