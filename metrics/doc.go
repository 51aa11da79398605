// Package metrics defines the Prometheus metrics of the agent and the
// aggregator with Prometheus's Go client, on a private registry that main
// creates (NewRegistry: the process's and the Go runtime's usual series
// beside the project's), and counts client-go's requests and watches
// (client.go).
//
// Names are maintenance_handler_<subsystem>_<name> with _total and _seconds
// units; every label value is bounded (a key, a result, an outcome, an
// interruption type or reason, a phase, a pool, a watch): never a pod or an
// event id, and a node's name only on the series of the few nodes that need
// a person (vanished, or with values that cannot be read).
//
// Its types implement the small recorder interfaces that the metadata,
// drain and agent packages define, so those packages import no metrics
// library.
//
// Concurrency: every method is safe for concurrent use.
package metrics
