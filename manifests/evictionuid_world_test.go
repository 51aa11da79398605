package manifests_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/admission"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestAgentEvictionNamesItsPod: with the base applied and the check
// served, an agent's eviction of a pod on its own node that names no UID
// is refused (422, saying so), and so is one naming the UID of an earlier
// pod of that name: the API server evicts whatever pod holds the name when
// it gets there, which may have been created on another node after the
// check read the pod. Naming the pod's UID, it is evicted.
func TestAgentEvictionNamesItsPod(t *testing.T) {
	testworld.Need(t)
	const node = "uid-gpu"
	world.NodeT(t, testworld.NodeSpec{Name: node})
	apply(t, render(t, "base"))
	agent := agentPodOn(t, node)
	scaleAggregatorToZero(t)
	check := hostEvictionCheck(t, testworld.ShippedNamespace)
	as, err := kubernetes.NewForConfig(world.ConfigForToken(agentToken(t, agent).Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testworld.Ctx(t, 2*time.Minute)
	const pod = "uid-victim"
	podOn(t, "default", pod, node)

	err = evictWhenServedBy(t, func() error { return evictUID(t, as, "default", pod, nil) })
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "deleteOptions.preconditions.uid") {
		t.Errorf("the agent's eviction of %s with no UID: %v, want 422 naming the precondition", pod, err)
	}
	first, err := world.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil || first.DeletionTimestamp != nil {
		t.Fatalf("the pod evicted with no UID is gone or going: %v", err)
	}

	// The pod is created again under its name: the UID the agent read
	// before names no pod now.
	zero := int64(0)
	if err := world.Client.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	world.WaitPods(t, "default", "", "the pod gone", func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.Name == pod {
				return false
			}
		}
		return true
	})
	podOn(t, "default", pod, node)
	old := first.UID
	if err := evictUID(t, as, "default", pod, &old); !apierrors.IsNotFound(err) {
		t.Errorf("the agent's eviction of %s with the UID of an earlier pod of its name: %v, want 404", pod, err)
	}
	second, err := world.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil || second.DeletionTimestamp != nil {
		t.Fatalf("the pod created again was evicted for an earlier one's UID: %v", err)
	}
	uid := second.UID
	if err := evictUID(t, as, "default", pod, &uid); err != nil {
		t.Errorf("the agent's eviction of %s naming its UID: %v, want allowed", pod, err)
	}
	if allowed, refused := testutil.ToFloat64(check.Checks.WithLabelValues(admission.Allowed)), testutil.ToFloat64(check.Checks.WithLabelValues(admission.Refused)); allowed != 1 || refused != 2 {
		t.Errorf("eviction checks: %v allowed, %v refused; want 1 and 2", allowed, refused)
	}
}
