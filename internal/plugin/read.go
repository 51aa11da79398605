package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/policy"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// ReadOptions say what to read.
type ReadOptions struct {
	// Selector and Pool narrow the nodes shown.
	Selector, Pool string
	// Policy is the policy ConfigMap, namespace/name ("" for none).
	Policy    string
	PoolLabel string
	// SliceLabel names a node's multi-host slice, as the aggregator's
	// --slice-label ("" for GKE's rule).
	SliceLabel string
	// ReservationGroups is the aggregator's --reservation-groups.
	ReservationGroups string
	// AgentNamespace holds the observed nodes' Leases ("" reads none).
	AgentNamespace string
}

// Read reads what the plugin shows, at now: every node (pools are whole),
// the names asked for (all when none), the project's Events, the pods of
// the nodes in maintenance, and the policy.
func Read(ctx context.Context, c *kube.Client, now time.Time, o ReadOptions, names []string) (Input, error) {
	in := Input{Now: now, PoolLabel: o.PoolLabel, SliceLabel: o.SliceLabel, ReservationGroups: o.ReservationGroups}
	list, err := c.ListNodes(ctx, metav1.ListOptions{})
	if err != nil {
		return in, Explain(err, "list Nodes")
	}
	if err := observe(ctx, c, o.AgentNamespace, list.Items, &in); err != nil {
		return in, err
	}
	installed := false
	byName := map[string]*corev1.Node{}
	for i := range list.Items {
		n := &list.Items[i]
		in.Nodes = append(in.Nodes, n)
		byName[n.Name] = n
		_, seen := n.Annotations[protocol.AnnotationLastBootID]
		installed = installed || seen
	}
	if !installed {
		return in, fmt.Errorf("no Node carries maintenance-handler's keys (%s, written by its agent): is it installed on this cluster (kubectl apply -k manifests/base), and do its agents run on the accelerator nodes?", protocol.AnnotationLastBootID)
	}
	shown, err := shownNodes(ctx, c, o, names, byName)
	if err != nil {
		return in, err
	}
	in.Shown = shown
	events, err := c.ListEvents(ctx, "", metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"})
	if err != nil {
		return in, Explain(err, "list Events")
	}
	for _, e := range events.Items {
		if shown[e.InvolvedObject.Name] {
			in.Events = append(in.Events, e)
		}
	}
	for name := range shown {
		if !protocol.ReadAgentState(byName[name]).Active() {
			continue
		}
		pods, err := c.ListPods(ctx, "", metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return in, Explain(err, "list the pods of "+name)
		}
		for i := range pods.Items {
			in.Pods = append(in.Pods, &pods.Items[i])
		}
	}
	if ns, name, ok := strings.Cut(o.Policy, "/"); ok {
		in.PolicySource = "ConfigMap " + o.Policy
		cm, err := c.GetConfigMap(ctx, ns, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return in, Explain(err, "read the policy ConfigMap "+o.Policy)
		default:
			in.Config, in.ConfigErr = policy.ParseConfig(cm.Data[policy.ConfigKey])
		}
	}
	return in, nil
}

// shownNodes are the Nodes to show: those named (each must exist), or
// every Node, narrowed by the selector and the pool when given.
func shownNodes(ctx context.Context, c *kube.Client, o ReadOptions, names []string, byName map[string]*corev1.Node) (map[string]bool, error) {
	shown := map[string]bool{}
	for _, name := range names {
		if byName[name] == nil {
			return nil, fmt.Errorf("node %q not found", name)
		}
		shown[name] = true
	}
	if o.Selector != "" || o.Pool != "" || len(names) == 0 {
		sel := o.Selector
		if o.Pool != "" {
			sel = strings.Trim(sel+","+o.PoolLabel+"="+o.Pool, ",")
		}
		matching, err := c.ListNodes(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, Explain(err, "list Nodes")
		}
		match := map[string]bool{}
		for _, n := range matching.Items {
			match[n.Name] = true
		}
		if len(names) == 0 {
			shown = match
		} else {
			for name := range shown {
				if !match[name] {
					delete(shown, name)
				}
			}
		}
	}
	return shown, nil
}

// Explain words an API error for a person.
func Explain(err error, what string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("no permission to %s (%v): kubectl gce-maintenance reads Nodes, Events, the pods of nodes in maintenance and the policy ConfigMap", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// observe shows on each observed node what its agent decided and did not
// write (its Lease in namespace: protocol.AnnotationShadow), as the
// aggregator reads it, and names the node in in.Observed. One who may not
// read the Leases sees the Nodes as they are.
func observe(ctx context.Context, c *kube.Client, namespace string, nodes []corev1.Node, in *Input) error {
	if namespace == "" {
		return nil
	}
	leases, err := c.Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: protocol.ObservedNodeSelector})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return Explain(err, "list the observed nodes' Leases in "+namespace)
	}
	shadows := map[string]string{}
	for _, l := range leases.Items {
		shadows[l.Name] = l.Annotations[protocol.AnnotationShadow]
	}
	for i := range nodes {
		v, ok := shadows[nodes[i].Name]
		if !ok {
			continue
		}
		s, err := protocol.DecodeShadow(v)
		if err != nil {
			continue // unreadable: the Node as it is
		}
		s.Overlay(&nodes[i])
		if in.Observed == nil {
			in.Observed = map[string]bool{}
		}
		in.Observed[nodes[i].Name] = true
	}
	return nil
}
