package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/gentype"

	"github.com/maintenance-handler/maintenance-handler/drain"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	"github.com/maintenance-handler/maintenance-handler/metadata"
)

// TestNewRejectsOrDefaults: a zero Options is refused, naming every
// missing field; a zero Config takes the documented deadlines, never
// "now" (which would evict every pod with no grace).
func TestNewRejectsOrDefaults(t *testing.T) {
	_, err := New(Options{})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New(Options{}) = %v, want ErrInvalidOptions", err)
	}
	for _, field := range []string{"Client", "NodeName", "Watcher", "Pods"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q does not name %s", err, field)
		}
	}
	a, err := New(Options{Client: nopAPI{}, NodeName: "n", Watcher: nopWatcher{}, Pods: &drain.NodePods{}})
	if err != nil {
		t.Fatal(err)
	}
	if a.opts.Config != lifecycle.DefaultConfig {
		t.Errorf("zero Config became %+v, want %+v", a.opts.Config, lifecycle.DefaultConfig)
	}
	if a.opts.Drainer == nil || a.opts.Metrics == nil || a.opts.Events == nil || a.opts.Clock == nil {
		t.Error("a default is missing")
	}
}

type nopAPI struct{}

func (nopAPI) GetNode(context.Context, string) (*corev1.Node, error) { return nil, nil }
func (nopAPI) PatchPod(context.Context, string, string, types.PatchType, []byte, string) error {
	return nil
}

func (nopAPI) PatchNodeStatus(context.Context, string, []byte) error { return nil }

func (nopAPI) GetResourceClaim(context.Context, string, string) (*resourcev1.ResourceClaim, error) {
	return nil, nil
}

func (nopAPI) UpdateNode(context.Context, *corev1.Node, string) (*corev1.Node, error) {
	return nil, nil
}
func (nopAPI) NodeListWatch(string) kube.ListWatch                  { return kube.ListWatch{} }
func (nopAPI) LabelledNodesListWatch(string, string) kube.ListWatch { return kube.ListWatch{} }
func (nopAPI) BudgetListWatch(string) kube.ListWatch                { return kube.ListWatch{} }
func (nopAPI) ResourceSliceListWatch(string) kube.ListWatch         { return kube.ListWatch{} }
func (nopAPI) DeviceTaintRules() *gentype.ClientWithList[*resourcev1.DeviceTaintRule, *resourcev1.DeviceTaintRuleList] {
	return nil
}
func (nopAPI) Evict(context.Context, *policyv1.Eviction) error                       { return nil }
func (nopAPI) DeletePod(context.Context, string, string, metav1.DeleteOptions) error { return nil }

type nopWatcher struct{}

func (nopWatcher) Watch(context.Context, string, metadata.Handler) error { return nil }
