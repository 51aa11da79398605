// Package fleet is the cluster's decision, pure: which nodes with a
// pending maintenance to start now, opportunistically, per node pool,
// without taking a pool below its min-nodes or past its caps on voluntary
// maintenance, inside its windows and outside its exclusions, never on a
// node that runs workloads, cools down from a failure, is left to GKE's
// own handler, or shows values no one can read; what every host of a
// multi-host slice or a gang must carry when one of them goes down; and
// which nodes make each gang.
//
// Its files: the Node view, decoded once per change of a Node (node.go),
// the decision over every pool (decide.go) and one pool's (pool.go), the
// cluster autoscaler's node groups (autoscaler.go), multi-host slices
// (slice.go: picked whole or not at all, and the asks that every host of a
// slice that goes down carries; a node whose membership is unproven causes
// none and counts alone under the caps), gangs (gang.go: which nodes run one pod
// group's pods, by the pods the aggregator read), and the fleet kept from
// pass to pass
// (fleet.go: Fleet decides again only the pools whose nodes changed, and
// reuses every other pool's plan while what it read holds, time included;
// eligibility.go: of a pool decided again, it reads again only the nodes
// that changed, and what it found of every other while that holds).
//
// The aggregator keeps a Fleet and runs its Decide, DecideFaults and
// SliceAsks while it leads, and writes what they say; `kubectl gce-maintenance status` and `trigger` ask the same
// functions from what the Nodes show, so a person sees the aggregator's
// reasons without asking it.
//
// What it does not do: read or write the API server, read a clock (now is
// an argument), or decide about one node's lifecycle (package lifecycle
// does, on the node's agent). A test holds that it links no client.
//
// Concurrency: pure functions over values, safe for concurrent use; a
// Fleet is not.
package fleet
