package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// AgentSelector selects the agents' pods in their namespace.
const AgentSelector = "app.kubernetes.io/name=maintenance-handler,app.kubernetes.io/component=agent"

// Uninstalled is what Uninstall did.
type Uninstalled struct {
	// Cleaned are the Nodes it removed keys from; InMaintenance, the Nodes
	// it left as they were because a maintenance is under way on them.
	Cleaned, InMaintenance []string
}

// UninstallScope is where Uninstall looks.
type UninstallScope struct {
	// Namespace holds the aggregator's Leases: LeaseName and its claims
	// Lease. AgentNamespace holds the agents' pods.
	Namespace, AgentNamespace, LeaseName string
}

// Uninstall removes what the product wrote in the cluster once it is being
// uninstalled: it waits until no agent pod is left in the agents'
// namespace (an agent would write its keys again), then removes every key
// of the agent and the aggregator from each Node with no maintenance under
// way (protocol.Forget, protocol.ForgetConditions), with a Warning Event on
// each Node it leaves, and deletes the aggregator's Leases. Each write is
// retried on conflict; ctx bounds the whole.
func Uninstall(ctx context.Context, client *kube.Client, leases coordinationv1client.LeasesGetter, clk clock.Clock, scope UninstallScope, log *slog.Logger) (Uninstalled, error) {
	var done Uninstalled
	if err := waitNoAgents(ctx, client, scope.AgentNamespace, log); err != nil {
		return done, err
	}
	nodes, err := client.ListNodes(ctx, metav1.ListOptions{})
	if err != nil {
		return done, fmt.Errorf("list nodes: %w", err)
	}
	var errs []error
	for _, n := range nodes.Items {
		cleaned, underWay, err := forgetNode(ctx, client, n.Name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		case underWay:
			done.InMaintenance = append(done.InMaintenance, n.Name)
			log.Warn("a maintenance is under way: the node keeps its cordon, taint and keys", "node", n.Name)
			msg := "maintenance-handler was uninstalled while this node's maintenance was under way: the node keeps its cordon, taint and the product's keys; once the maintenance is over, install and uninstall again, or uncordon the node and remove the taint " + protocol.TaintImpendingTermination
			if err := nodeWarning(ctx, client, clk, &n, protocol.EventUninstallLeftNode, msg); err != nil {
				errs = append(errs, fmt.Errorf("node %s: event: %w", n.Name, err))
			}
		case cleaned:
			done.Cleaned = append(done.Cleaned, n.Name)
			log.Info("removed the product's keys", "node", n.Name)
		}
	}
	for _, name := range []string{scope.LeaseName, ClaimsLeaseName(scope.LeaseName)} {
		err := leases.Leases(scope.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("lease %s: %w", name, err))
		}
	}
	return done, errors.Join(errs...)
}

// waitNoAgents returns once no agent pod is left in namespace.
func waitNoAgents(ctx context.Context, client *kube.Client, namespace string, log *slog.Logger) error {
	for {
		list, err := client.ListPods(ctx, namespace, metav1.ListOptions{LabelSelector: AgentSelector})
		if err != nil {
			return fmt.Errorf("list the agents' pods: %w", err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		log.Info("waiting for the agents' pods to be gone", "left", len(list.Items))
		w, err := client.WatchPods(ctx, namespace, metav1.ListOptions{LabelSelector: AgentSelector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return fmt.Errorf("watch the agents' pods: %w", err)
		}
		left := len(list.Items)
		for e := range w.ResultChan() {
			if e.Type == watch.Deleted {
				left--
			}
			if left == 0 || e.Type == watch.Error {
				break
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("the agents' pods are not gone: %w", err)
		}
	}
}

// forgetNode removes the product's keys from the Node name, and its node
// lifecycle conditions, unless a maintenance is under way on it.
func forgetNode(ctx context.Context, client *kube.Client, name string) (cleaned, underWay bool, err error) {
	var conditions []corev1.NodeConditionType
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.GetNode(ctx, name)
		if err != nil {
			return err
		}
		var changed bool
		if changed, underWay = protocol.Forget(n); underWay {
			return nil
		}
		conditions = protocol.ForgetConditions(n)
		if !changed {
			return nil
		}
		cleaned = true
		_, err = client.UpdateNode(ctx, n, "")
		return err
	})
	if apierrors.IsNotFound(err) {
		return false, false, nil
	}
	if err != nil || underWay || len(conditions) == 0 {
		return cleaned, underWay, err
	}
	// A strategic merge patch deletes each condition by its type.
	var drop []map[string]string
	for _, c := range conditions {
		drop = append(drop, map[string]string{"type": string(c), "$patch": "delete"})
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": drop}})
	if _, err := client.PatchNode(ctx, name, types.StrategicMergePatchType, patch, "", "status"); err != nil && !apierrors.IsNotFound(err) {
		return cleaned, false, fmt.Errorf("remove conditions %v: %w", conditions, err)
	}
	return true, false, nil
}

// nodeWarning records a Warning Event on n, from the aggregator.
func nodeWarning(ctx context.Context, client *kube.Client, clk clock.Clock, n *corev1.Node, reason, msg string) error {
	now := metav1.NewTime(clk.Now())
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: n.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: protocol.EventSourceAggregator},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	return client.CreateEvent(ctx, e)
}
