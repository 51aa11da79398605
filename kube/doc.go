// Package kube is the binaries' use of client-go, and the narrow interface
// their code needs from it: the few calls they make (Nodes, the pods bound
// to a node, evictions and deletions of those pods, Events, ConfigMaps,
// PodDisruptionBudgets), informers of the sets they watch, and Events
// recorded about a Node.
//
//   - Load (config.go) is client-go's clientcmd: a kubeconfig as kubectl
//     loads it (credential plugins included), or else the pod's service
//     account, whose token file client-go reads again as the kubelet
//     rotates it, and at once after a 401.
//   - Client (client.go) is client-go's REST client, with a scheme of the
//     core and policy groups alone (the typed clientset registers every
//     API group at start-up: megabytes of a binary that runs on every
//     node), and generic typed clients (gentype) over it. It speaks
//     protobuf, as the kubelet does.
//   - Informer (informer.go) is client-go's shared informer of one set,
//     with the health of its list and watch kept for /healthz and the
//     metrics: client-go relists with its backoff (reset after two
//     minutes healthy), from the last version seen (from the watch
//     cache, not a consistent read) when a watch expired.
//   - Recorder (events.go) is client-go's record package: repeats counted
//     on one Event, a burst of 25 per spam key (an object and reason, or
//     for a node's agent the very same Event) then one per five minutes,
//     retries; never a message combined from several.
//
// What it does not do: retry a Client's calls (the callers own their retry
// policies; client-go waits out a 429's Retry-After itself).
//
// Concurrency: a Client and an Informer are safe for concurrent use.
package kube
