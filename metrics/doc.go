// Package metrics defines the Prometheus metrics of the agent, on a private
// registry passed in by main. Names are maintenance_handler_<subsystem>_<name>
// with _total and _seconds units; every label value is bounded (a key, a
// result, an outcome, an interruption type or reason, a phase): never a node,
// pod or event id.
//
// Its types implement the small recorder interfaces that the metadata, drain
// and agent packages define, so those packages do not import Prometheus.
//
// Concurrency: every method is safe for concurrent use.
package metrics
