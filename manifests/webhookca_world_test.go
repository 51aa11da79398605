package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// aggregatorWritesOnlyTheCA: with its own token, the aggregator may patch
// its webhook configuration's caBundle, and nothing else of it: not its
// failure policy (which would let every agent's eviction through while no
// replica answers), its service, or its rules.
func aggregatorWritesOnlyTheCA(t *testing.T, agg kubernetes.Interface) {
	t.Helper()
	ctx := testworld.Ctx(t, 2*time.Minute)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patch := func(ctx context.Context, body string) error {
		_, err := agg.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, evictionWebhook, types.StrategicMergePatchType, []byte(body), dry)
		return err
	}
	const fenced = "may change only the caBundle"
	webhook := `{"webhooks":[{"name":"evictions.maintenance-handler.io",`
	// The API server takes the policy up a moment after it is written.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := patch(ctx, webhook+`"failurePolicy":"Ignore"}]}`)
		return err != nil && strings.Contains(err.Error(), fenced), nil
	}); err != nil {
		t.Fatalf("the webhook policy never took effect: %v", err)
	}
	// Where the API server sends the evictions: the test world points the
	// configuration at a URL, a cluster at the service.
	cfg, err := agg.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, evictionWebhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	address := `"clientConfig":{"service":{"name":"elsewhere"}}`
	if cfg.Webhooks[0].ClientConfig.URL != nil {
		address = `"clientConfig":{"url":"https://elsewhere.example:443/evictions"}`
	}
	for what, body := range map[string]string{
		"its failure policy": webhook + `"failurePolicy":"Ignore"}]}`,
		"its address":        webhook + address + `}]}`,
		"its rules":          webhook + `"rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods/binding"],"scope":"Namespaced"}]}]}`,
		"its timeout":        webhook + `"timeoutSeconds":30}]}`,
	} {
		if err := patch(ctx, body); err == nil || !strings.Contains(err.Error(), fenced) {
			t.Errorf("the aggregator changing %s: %v, want denied saying %q", what, err, fenced)
		}
	}
	if err := patch(ctx, webhook+`"clientConfig":{"caBundle":"`+testCABundle+`"}}]}`); err != nil {
		t.Errorf("the aggregator writing the caBundle: %v, want allowed", err)
	}
}

// testCABundle is a PEM block's base64, as caBundle takes it (its content
// is not checked).
const testCABundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrekNDQVRtZ0F3SUJBZ0lCQVRBS0JnZ3Foa2pPUFFRREFqQVNNUkF3RGdZRFZRUURFd2R3Y205aVpUQWcKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
