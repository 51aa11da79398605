// Package metrics defines the Prometheus metrics of the agent and the
// aggregator, on a private registry passed in by main, and writes them in
// Prometheus's text exposition format itself (registry.go): counters,
// gauges and histograms with labels, and the usual process and Go runtime
// series (process.go). Prometheus's Go client gathers through protobuf
// messages, which would add about 3 MB to a binary that runs on every node.
//
// Names are maintenance_handler_<subsystem>_<name> with _total and _seconds
// units; every label value is bounded (a key, a result, an outcome, an
// interruption type or reason, a phase, a pool): never a pod or an event
// id, and a node's name only on the series of the few nodes that need a
// person (vanished, or with values that cannot be read).
//
// Its types implement the small recorder interfaces that the metadata, drain
// and agent packages define, so those packages import no metrics library.
//
// Concurrency: every method is safe for concurrent use.
package metrics
