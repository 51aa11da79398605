// Package admission is the eviction check: a validating admission webhook
// that holds the agent's evictions to the pods bound to the Node named in
// its token, as the API server's own node restriction holds a kubelet to
// its node. A ValidatingAdmissionPolicy cannot do it: an eviction's
// admission request carries the Eviction, not the pod it names, so the
// check reads the pod (Check). The API server reads the pod again after
// the check: an agent's eviction must name the pod's UID in its
// precondition (as the agent's drain always does), and the check refuses
// one that names none (422) or another UID than the pod's (404), so that a
// pod of the same name created on another node in between is never
// evicted.
//
// Every aggregator replica serves it (Serve), not only the leader, so that
// a failover does not take it away. The webhook configuration matches only
// the agent's service account (a matchCondition in the API server), so
// nothing else in the cluster depends on it; its failurePolicy is Fail, so
// an agent's eviction is refused while no replica answers. The agent
// treats that refusal as it treats a budget's: it retries, and a forced
// drain deletes the pod, through the delete the admission policy holds to
// its own node, at the last moment that leaves the pod its whole grace.
//
// Its serving certificate is the product's own (Certs): a CA kept in a
// Secret (created by the first replica that finds none, ten years long,
// replaced when less than a year is left, the old CA kept in the bundle
// while it is valid), a serving certificate each replica signs for itself
// in memory (90 days, renewed 30 days before its end), and the CA written
// into the webhook configuration's caBundle, checked again every few
// minutes so that a re-applied configuration gets it back.
//
// Who may ask (Callers): where the API server presents a credential to
// webhooks (a self-managed control plane's admission configuration), only
// the users named, by the bearer token the API server reviews; others are
// turned away before any pod is read. The API server's token is kept
// apart from unknown ones: remembered apart and reviewed again outside any
// budget, while unknown tokens are reviewed within a budget per client
// address and one for all. GKE's presents none: there the network fences
// the check. Its listener holds each client address to a share of
// connections (internal/cli), so that no pod holding connections open
// keeps the API server's calls out.
//
// What it does not do: decide anything about budgets (the Eviction API
// does), or look at any request but the agent's evictions.
//
// What one source may make it read (Sources): a source (one node's pods,
// by their node's pod range, as the listeners' shares of connections go;
// any other address by itself) has a budget of refused reviews, 5 a second
// in bursts of 20, checked before any pod is read: past it, its reviews
// that would need a read are refused unread (429). An address in no node's
// range (the API server's, which carries every agent's evictions) has
// such a budget per node its reviews' tokens name, and a wider one for
// all of them. A review the check
// allows spends none, so the API server's calls never wait on a budget,
// wherever they come from; and a pod's node, once read, is remembered by
// its UID (PodNodes), so a review asked again of one pod costs no read.
// Where callers are named, an unknown token's review is budgeted per
// source too.
//
// Concurrency: Check serves requests concurrently; its Sources and
// PodNodes hold their state under a lock;
// Callers remembers tokens' answers and the budgets under a lock, and
// requests that bring one token at once share its review; Certs' certificate is
// swapped under a lock, read by every TLS handshake.
package admission
