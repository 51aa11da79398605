package drain

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// NodePods is a PodSource fed by one watch of the pods bound to a node
// (field selector spec.nodeName), in every namespace: no periodic LIST.
type NodePods struct {
	informer *kube.Informer
	changed  chan struct{}
}

var _ PodSource = (*NodePods)(nil)

// NewNodePods returns a NodePods fed by lw, which lists and watches the pods
// bound to one node (kube.Client.PodListWatch); a failed watch is logged
// to log. Call Start before List.
func NewNodePods(lw kube.ListWatch, log *slog.Logger) *NodePods {
	n := &NodePods{informer: kube.NewInformer(lw, kube.InformerOptions{Name: "pods", Transform: SlimPod, Logger: log}), changed: make(chan struct{}, 1)}
	n.informer.AddHandlers(kube.OnAnyChange(func() {
		select {
		case n.changed <- struct{}{}:
		default:
		}
	}))
	return n
}

// PodAnnotations are the pod annotations the cache keeps (see SlimPod).
var PodAnnotations = []string{
	corev1.MirrorPodAnnotationKey,
	protocol.PodAnnotationSafeToEvict,
	protocol.PodAnnotationCheckpointLead,
	protocol.PodAnnotationNotice,
}

// SlimPod keeps of a pod only what the agent reads: its identity, labels
// (the budgets that cover it select by them), owners, creation and
// deletion times, the annotations in PodAnnotations, its
// grace period, tolerations, each container's resources, its eviction
// responders and scheduling group (EvictionRequests), its phase, and the
// health of the devices allocated to its containers (device health). A
// node's 110 pods then cost a few kilobytes each in the cache instead of
// their whole spec, status and managed fields. It is the pods' informer's
// transform.
func SlimPod(obj kube.Object) kube.Object {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj
	}
	slim := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds, OwnerReferences: p.OwnerReferences,
		},
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, TerminationGracePeriodSeconds: p.Spec.TerminationGracePeriodSeconds,
			Tolerations: p.Spec.Tolerations,
			// Devices held through dynamic resource allocation: the
			// claims name them (idleness).
			ResourceClaims: p.Spec.ResourceClaims,
			// Who answers an EvictionRequest for it (request.go).
			EvictionResponders: p.Spec.EvictionResponders, SchedulingGroup: p.Spec.SchedulingGroup,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, ResourceClaimStatuses: p.Status.ResourceClaimStatuses},
	}
	for _, k := range PodAnnotations {
		if v, ok := p.Annotations[k]; ok {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			slim.Annotations[k] = v
		}
	}
	slimContainers := func(cs []corev1.Container) []corev1.Container {
		if len(cs) == 0 {
			return nil
		}
		out := make([]corev1.Container, len(cs))
		for i, c := range cs {
			out[i] = corev1.Container{Name: c.Name, Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests, Limits: c.Resources.Limits}}
		}
		return out
	}
	slim.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	slim.Spec.Containers = slimContainers(p.Spec.Containers)
	// The health of each container's allocated devices, where the kubelet
	// reports it: a device turned unhealthy is a fault signal.
	for _, cs := range p.Status.ContainerStatuses {
		if len(cs.AllocatedResourcesStatus) > 0 {
			slim.Status.ContainerStatuses = append(slim.Status.ContainerStatuses,
				corev1.ContainerStatus{Name: cs.Name, AllocatedResourcesStatus: cs.AllocatedResourcesStatus})
		}
	}
	return slim
}

// Start runs the watch until ctx ends; it returns once the cache is filled
// (or ctx ended first).
func (n *NodePods) Start(ctx context.Context) error {
	if err := n.informer.Start(ctx); err != nil {
		return fmt.Errorf("sync pod cache: %w", err)
	}
	return nil
}

// List returns the node's pods as last seen.
func (n *NodePods) List() []*corev1.Pod {
	objs := n.informer.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// OnChange calls f after every change to the node's pods. Call it before
// Start; f must not block.
func (n *NodePods) OnChange(f func()) {
	n.informer.AddHandlers(kube.OnAnyChange(f))
}

// Changed receives a value after any change to the node's pods (coalesced).
func (n *NodePods) Changed() <-chan struct{} { return n.changed }

// Unhealthy says why when the pods' list or watch has failed for longer
// than bound.
func (n *NodePods) Unhealthy(bound time.Duration) error { return n.informer.Unhealthy(bound) }
