// Package protocol is the Node protocol: every label, annotation and taint
// the project reads or writes on a Node (and the pod keys it reads and
// writes), their value vocabularies, the interruption taxonomy, the
// encoding of each component's state on a Node, decoded into typed values,
// and every Event reason with who records it (events.go). The rules that
// read them are elsewhere: one node's lifecycle in package lifecycle, the
// fleet's decision in package fleet.
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
// A group's membership (membership.go) is read from labels a node's
// kubelet writes, and so is a claim: Grouping.Unproven says whether the
// aggregator's read of the node's VM from Compute Engine (VMFacts: its
// machine type and GKE node pool, the reservation block and sub-block it
// runs in) proves it.
// Decisions about other nodes read only proven members.
//
// Versions: a key keeps its meaning across releases, so that an agent or
// an aggregator of one release reads what another wrote, and an upgrade or
// a downgrade replaces them at any moment. A value may gain new words (a
// reader takes a word it does not know as the safest one, as
// Reason.DisruptionReason does); a change of a key's meaning instead comes
// under a new key name, the old one still read for one release, which
// CHANGELOG.md then marks as not to be skipped.
//
// What it does not do: talk to the API server, decide anything, or know
// about pods beyond the keys it names. It
// imports only the Kubernetes API types and package metadata (the
// notice's format).
//
// Concurrency: constants, pure functions and functions that change only
// the Node passed in; safe for concurrent use on distinct Nodes.
package protocol
