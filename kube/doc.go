// Package kube is the project's client of the Kubernetes API: the few
// calls its binaries make (Nodes, the pods bound to a node, evictions and
// deletions of those pods, Events, ConfigMaps, PodDisruptionBudgets), in
// JSON over net/http, an Informer that keeps a watched set in memory, and
// the Event Recorder. It imports no client-go: the agent, which runs on
// every accelerator node, links it and nothing of client-go.
//
// Why not client-go: its REST client loads the exec credential plugin,
// whose codec factory holds the protobuf serializer, so that every
// registered type's generated protobuf code stays linked whatever the
// client speaks; with client-go's REST client and informers the agent was
// 16.1 MB, with this package 11.9 MB (and its resident memory follows:
// most of it is the binary's pages). The agent's watches are small (its
// Node, its pods, its slice's Nodes, budgets while it drains, a
// ConfigMap), so JSON costs it little; the aggregator, which watches every
// Node of the cluster, does that one watch in protobuf through
// internal/kuberest.
//
// Config (config.go) is loaded from a kubeconfig (its current context: the
// server, its CA or insecure-skip-tls-verify, a client certificate, a
// token or token file) or from a pod's service account (the token read
// again every minute, as the kubelet rotates it). Credential plugins are
// refused: the agent runs in a pod; the aggregator and the plugin load
// kubectl's configuration through internal/kuberest and use this Client
// over client-go's authenticated transport.
//
// Informer (informer.go) is client-go's informer cut to what the binaries
// use: one list, then one watch from its version, watched again from the
// last version seen when the API server ends it, listed again (with
// backoff) when it fails or the version expired; handlers told of each
// change in order. No resync, no indexes.
//
// Recorder (events.go) writes Events for both the agent and the
// aggregator, as client-go's recorder does (repeats counted on one Event,
// a burst per kind then one per five minutes, retries), without the
// strategic merge patch and OpenAPI models that recorder brings.
//
// What it does not do: anything but those calls; retries of a Client's
// calls (the callers own their retry policies), the Recorder's own writes
// and the Informer's lists and watches apart.
//
// Concurrency: a Client and an Informer are safe for concurrent use.
package kube
