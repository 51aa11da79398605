package testworld

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server is configured as GKE's where GKE differs from upstream in
// a way an install can trip on.
//
// Pods at the two system priority classes are created only in a namespace
// with a ResourceQuota whose scope names their class. GKE's API servers
// configure the ResourceQuota admission plugin's limitedResources so
// (Kubernetes' "Resource Quotas" page, "Limit Priority Class consumption
// by default", gives the configuration; the GCE cluster scripts GKE grew
// from write this one, kubernetes/kubernetes cluster/gce/gci/
// configure-helper.sh), and keep one such quota, gcp-critical-pods, in
// kube-system alone. Elsewhere the API server answers "insufficient quota
// to match these scopes" and a DaemonSet or ReplicaSet creates no pod.
// Many projects' installs were caught by it on GKE (Flux, Gatekeeper,
// Istio and NVIDIA's GPU operator each document or ship such a quota).

// CriticalPriorityClasses are the priority classes GKE's API servers
// limit to namespaces with a quota for them.
var CriticalPriorityClasses = []string{"system-node-critical", "system-cluster-critical"}

// criticalPodsLimited is the ResourceQuota plugin's entry of the API
// server's admission configuration, as GKE's.
var criticalPodsLimited = fmt.Sprintf(`  - name: ResourceQuota
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ResourceQuotaConfiguration
      limitedResources:
        - resource: pods
          matchScopes:
            - scopeName: PriorityClass
              operator: In
              values: [%q, %q]
`, CriticalPriorityClasses[0], CriticalPriorityClasses[1])

// GKECriticalPodsQuota is the name of the quota GKE keeps in kube-system.
const GKECriticalPodsQuota = "gcp-critical-pods"

// createGKEQuota makes the quota GKE keeps in kube-system: pods at the
// critical classes, without a practical limit.
func (w *World) createGKEQuota(ctx context.Context) error {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: GKECriticalPodsQuota, Namespace: metav1.NamespaceSystem},
		Spec: corev1.ResourceQuotaSpec{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1G")},
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn,
				Values: CriticalPriorityClasses,
			}}},
		},
	}
	_, err := w.Client.CoreV1().ResourceQuotas(metav1.NamespaceSystem).Create(ctx, q, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create kube-system's quota for critical pods: %w", err)
	}
	return nil
}
