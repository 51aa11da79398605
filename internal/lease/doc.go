// Package lease is the aggregator's use of coordination.k8s.io/v1 Leases:
// reading and writing one (Client: the claims Lease, uninstall), and the
// run for leadership over one (Election).
//
// Why not client-go's leaderelection: its Lease lock takes client-go's
// typed clientset, whose scheme registers every API group when the binary
// starts; that alone made the aggregator binary 29 MB, for two calls on
// one resource. Election follows the same protocol on the same Lease
// fields, so a replica electing with client-go and one electing with this
// package elect one leader between them.
//
// What it does not do: fencing (a leader that lost its Lease may still be
// finishing a write; the aggregator fences its claims itself), or any
// clock agreement between replicas (each judges a Lease's age by when it
// saw it change).
//
// Concurrency: a Client is safe for concurrent use; an Election runs one
// term at a time (Run is not reentrant).
package lease
