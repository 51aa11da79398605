package protocol

import (
	"slices"
	"strings"
)

// Who is a class of identity the admission policies tell apart when they
// hold a Node key to its writer (package internal/generate makes the
// policies and the table in docs/security.md from Keys through Setters and
// Removers). A node holds several identities at once: its kubelet's
// (system:node:NAME), its agent's token and the token of any other pod
// bound to it (each carrying the node-name claim
// authentication.kubernetes.io/node-name). So a fence names who may change
// a key, and refuses everyone else, rather than naming whom to refuse.
type Who string

const (
	// WhoAgent is the agent's service account with a token whose node-name
	// claim names the Node written.
	WhoAgent Who = "agent"
	// WhoAggregator is the aggregator's service account.
	WhoAggregator Who = "aggregator"
	// WhoPerson is an identity known to be no node's: neither
	// system:node:*, nor a token carrying a node-name claim, nor a service
	// account (system:serviceaccount:*), nor a Google identity (a Google
	// service account's email, *.gserviceaccount.com, or an IAM principal
	// identifier, principal://* or principalSet://*); or a service account
	// or Google identity the operator names (admissionPolicy.people),
	// whatever node its token names (the operator keeps its pods off the
	// nodes the product maintains, which could have its token minted). So
	// a user, a control-plane component that authenticates as itself and
	// GKE's control plane are persons; a legacy token of a DaemonSet's
	// account, which the node running its pod can read, is not, nor is the
	// node VM's Google service account. No key needs an account named by
	// default: GKE writes its keys after registration from its control
	// plane, not as an account of the cluster, and a self-managed
	// cluster's controllers (system:serviceaccount:kube-system:* with
	// --use-service-account-credentials) write none of Keys.
	WhoPerson Who = "person"
	// WhoRegistration is a node's kubelet creating its own Node (its
	// --node-labels).
	WhoRegistration Who = "registration"
	// WhoOwnNode is any identity of the Node written: its kubelet, or a
	// token whose node-name claim names it.
	WhoOwnNode Who = "own-node"
	// WhoDetector is an identity the operator names as a fault detector;
	// one with a node-name claim writes only the Node it names.
	WhoDetector Who = "detector"
	// WhoUninstall is the uninstall Job's service account.
	WhoUninstall Who = "uninstall"
	// WhoAnyone is every identity: the cluster autoscaler's taint, which a
	// self-managed cluster's autoscaler sets from a pod (its token names
	// the node it runs on) on the nodes it removes. What it says (a node
	// removed on purpose, not lost, as a cordon says) moves no other node.
	WhoAnyone Who = "anyone"
)

// OnNode reports whether k is a key of a Node object (label, annotation,
// taint or condition), which the Node admission policies fence.
func (k Key) OnNode() bool {
	switch k.Kind {
	case Label, Annotation, Taint, Condition:
		return true
	}
	return false
}

// Setters are who may set or change k on a Node: its writer, and those
// who may request it. Keys GKE's own maintenance handler writes too
// (SharedWithGKE) are the Node's own word: any identity of that Node, or
// a person.
func (k Key) Setters() []Who {
	var who []Who
	switch {
	case k.SharedWithGKE:
		who = []Who{WhoOwnNode, WhoPerson}
	case k.Writer == Agent:
		who = []Who{WhoAgent}
	case k.Writer == Aggregator:
		who = []Who{WhoAggregator}
	case k.Writer == Detector:
		who = []Who{WhoDetector}
	case k.Writer == Autoscaler:
		who = []Who{WhoAnyone}
	default: // a person, GKE, the autoscaler: nothing on a node.
		who = []Who{WhoPerson}
	}
	if slices.Contains(k.Requesters, Person) {
		who = append(who, WhoPerson)
	}
	if k.Registration {
		who = append(who, WhoRegistration)
	}
	return sortedWho(who)
}

// Removers are who may remove k from a Node: its setters, the component
// that consumes it once answered, the uninstall Job and a person
// (withdrawing an approval or clearing what a component left behind).
func (k Key) Removers() []Who {
	who := append(k.Setters(), WhoPerson, WhoUninstall)
	if k.Consumer == Agent {
		who = append(who, WhoAgent)
	}
	return sortedWho(slices.DeleteFunc(who, func(w Who) bool { return w == WhoRegistration }))
}

// sortedWho is who sorted, each once.
func sortedWho(who []Who) []Who {
	slices.Sort(who)
	return slices.Compact(who)
}

// WhoList is who as a comma-separated list, the grouping key of the
// fences.
func WhoList(who []Who) string {
	s := make([]string, len(who))
	for i, w := range who {
		s[i] = string(w)
	}
	return strings.Join(s, ",")
}

// NodeKeys are the keys of Keys on a Node, each once.
func NodeKeys() []Key {
	var out []Key
	for _, k := range Keys {
		if k.OnNode() {
			out = append(out, k)
		}
	}
	return out
}
