// Package drain empties one node before its VM stops, by the project's drain
// policy: workload pods first, then kube-system pods, then DaemonSet pods,
// each group only after the previous one is gone; always the Eviction API
// first, so PodDisruptionBudgets hold; each pod's own grace period, capped
// to end by the deadline; refused evictions retried after a delay (never a
// hot loop) and turned into a delete at deadline - grace, so the pod still
// gets SIGTERM with its whole grace before the VM goes. Mirror pods, finished
// pods and the agent's own pod are never touched.
//
// Pods come from a watch-fed cache of the node's pods (NodePods): the drain
// re-reads it every round and wakes on every change, so it never waits on a
// pod that is gone and never LISTs periodically.
//
// What it does not do: taint, label or cordon the node (the agent does that
// before it drains), or decide the deadline.
//
// Concurrency: one Drain at a time per Drainer; NodePods is safe for
// concurrent use.
package drain
