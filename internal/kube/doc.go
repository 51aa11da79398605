// Package kube is the project's client of the Kubernetes API: the few
// calls its binaries make (Nodes, the pods bound to a node, evictions and
// deletions of those pods, Events, ConfigMaps, PodDisruptionBudgets), over
// client-go's REST client and watch machinery with a scheme of the core and
// policy groups alone. The agent, the aggregator and the kubectl plugin
// all use it; the aggregator's Leases go through internal/lease.
//
// Why not client-go's typed clientset: importing it registers every API
// group's types at start-up, which adds megabytes to the binary that every
// accelerator node pulls and to the agent's resident memory, for calls the
// agent never makes (measured in cmd/agent's benchmarks and the README).
// With it the aggregator was 29 MB and the plugin 47 MB; without, 16 and
// 18 MB.
//
// Recorder (events.go) writes Events for both the agent and the
// aggregator, as client-go's recorder does (repeats counted on one Event,
// a burst per kind then one per five minutes, retries), without the
// strategic merge patch and OpenAPI models that recorder brings.
//
// What it does not do: anything but those calls; retries of a Client's
// calls (the callers own their retry policies; client-go's rate limiter is
// shared by every call), the Recorder's own writes apart.
//
// Concurrency: a Client is safe for concurrent use.
package kube
