// Package drain empties one node before its VM stops, by the project's drain
// policy: workload pods first, then kube-system pods, then DaemonSet pods,
// each group only after the previous one is gone; always the Eviction API
// first, so PodDisruptionBudgets hold; each pod's own grace period, capped
// to end by the deadline; a refused eviction tried again the moment the
// budgets covering the pod allow (budgets.go follows them while the drain
// runs, once per change), or after a delay (never a hot loop), and turned
// into a delete at deadline - grace - EscalationLead, so the pod still
// gets SIGTERM with its whole grace before the VM goes. Mirror pods, finished
// pods and the agent's own pod are never touched.
//
// The plan is pure (plan.go): which pods, in which group, by which group
// deadline, when each is asked to stop (a checkpoint lead delays it) and
// with which grace. Plan lists it ahead for a preview (kubectl gce-maintenance
// trigger), the Drainer (drain.go) executes it, and both read the same
// functions. A voluntary drain (DrainVoluntary) never deletes: budgets
// hold to the end and what is left is returned.
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
