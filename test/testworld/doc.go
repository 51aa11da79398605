// Package testworld starts, for tests, a real Kubernetes control plane on
// loopback: etcd, kube-apiserver (token and service-account
// authentication, RBAC, admission), kube-controller-manager (disruption,
// garbage collection, namespaces, service accounts, ReplicaSets,
// Deployments, DaemonSets, node lifecycle), kube-scheduler, and kwok, which
// plays the kubelet for fake Nodes (heartbeats, pods that start, and pods
// that take the delay in their annotation PodDeleteDelayAnnotation to stop,
// never past their deletionTimestamp).
//
// The binaries are built once from pinned module versions into a cache
// outside the repository (Build, Dir; `go run ./cmd/testworld build`) and
// reused. RunMain starts one World for a test binary and stops it after the
// tests, even when one panics; CheckLeaks finds processes a run left.
// Helpers make what tests need: Nodes that kwok manages (NodeT), a
// namespace per test (Namespace), free loopback addresses, kubeconfigs.
//
// What it does not do: emulate the metadata server or the Compute API (see
// internal/gceemu), or run real containers.
//
// Concurrency: a World is shared by the tests of one binary; its helpers
// are safe for concurrent use by parallel tests.
package testworld
