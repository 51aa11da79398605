package testworld

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// JobSetVersion is the JobSet controller the test world runs: built from
// its Go module (its repository's main package), with the CRD it ships.
const JobSetVersion = "v0.11.0"

// jobSetCRD is the file name of JobSet's CRD in the built directory.
const jobSetCRD = "jobset.x-k8s.io_jobsets.yaml"

// JobSetDir is the directory that holds (or will hold) the built JobSet
// controller, in bin/, and its CRD: a sibling of Dir.
func JobSetDir() (string, error) {
	return siblingDir("jobset", JobSetVersion)
}

// BuildJobSet compiles JobSet's controller at JobSetVersion from the module
// proxy into dir, and copies its CRD there, unless they are there.
func BuildJobSet(ctx context.Context, dir string, progress io.Writer) error {
	return buildSteps(ctx, dir, progress, "jobset", "building JobSet's controller "+JobSetVersion+" into "+dir,
		func(b builder) []buildStep {
			return []buildStep{
				{"jobset " + JobSetVersion, func(ctx context.Context) error {
					// Built as its own main module, from its source as the
					// proxy serves it: the proxy serves the version, but
					// not the module's list, which go install asks for.
					mod, err := ModuleDir(ctx, "sigs.k8s.io/jobset@"+JobSetVersion)
					if err != nil {
						return err
					}
					tmp, err := os.MkdirTemp("", "testworld-jobset-")
					if err != nil {
						return err
					}
					defer os.RemoveAll(tmp)
					src := filepath.Join(tmp, "jobset")
					if err := os.CopyFS(src, os.DirFS(mod)); err != nil {
						return err
					}
					return b.goCmd(ctx, src, nil, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(b.bin, "jobset"), ".")
				}},
				{"jobset CRD", func(ctx context.Context) error {
					mod, err := ModuleDir(ctx, "sigs.k8s.io/jobset@"+JobSetVersion)
					if err != nil {
						return err
					}
					crd, err := os.ReadFile(filepath.Join(mod, "config", "components", "crd", "bases", jobSetCRD))
					if err != nil {
						return err
					}
					return os.WriteFile(filepath.Join(dir, jobSetCRD), crd, 0o644)
				}},
			}
		})
}

var jobset builtOnce

// JobSet runs JobSet's controller against w until tb ends, built first if
// this machine has none: its CRD applied, its webhooks served on
// 127.0.0.1 with the world's serving certificate and registered by URL (its
// pod webhooks only for pods a JobSet owns, so that no other test's pod
// depends on it), ready when it returns.
func (w *World) JobSet(tb testing.TB) {
	tb.Helper()
	bin := jobset.path(tb, "jobset", JobSetDir, "make testworld builds it", 20*time.Minute, BuildJobSet)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.applyJobSetCRD(ctx, filepath.Join(filepath.Dir(filepath.Dir(bin)), jobSetCRD)); err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	for from, to := range map[string]string{w.pki.servingCert: "tls.crt", w.pki.servingKey: "tls.key"} {
		data, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, to), data, 0o600)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	ports, err := freePorts(1)
	if err != nil {
		tb.Fatal(err)
	}
	port, health := ports[0], FreeAddrT(tb)
	config := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
internalCertManagement:
  enable: false
leaderElection:
  leaderElect: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: %s
`, port, dir, health)
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	p, err := w.StartProcess("jobset", bin, "--config", configFile, "--kubeconfig", w.Kubeconfig)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	if err := p.p.waitUntil(ctx, httpOK("http://"+health+"/readyz", nil)); err != nil {
		tb.Fatalf("JobSet's controller never became ready: %v", err)
	}
	// Ready is not served: JobSet sets its webhooks up beside its manager's
	// start, so a path may answer 404 for a while after /readyz is OK.
	for _, path := range jobSetWebhookPaths {
		if err := p.p.waitUntil(ctx, httpServed(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))); err != nil {
			tb.Fatalf("JobSet's webhook %s never served: %v", path, err)
		}
	}
	w.registerJobSetWebhooks(tb, ctx, port)
}

// jobSetWebhookPaths are the paths of JobSet's webhooks.
var jobSetWebhookPaths = []string{"/mutate-jobset-x-k8s-io-v1alpha2-jobset", "/mutate--v1-pod", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "/validate--v1-pod"}

// httpServed: url answers with anything but 404 (a handler is there: an
// admission webhook answers an empty request with its own error).
func httpServed(url string) func(context.Context) bool {
	return httpAnswers(http.MethodPost, url, nil, func(status int) bool { return status != http.StatusNotFound })
}

// applyJobSetCRD creates JobSet's CRD (if it is not there) and waits until
// it is established.
func (w *World) applyJobSetCRD(ctx context.Context, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	dyn, err := dynamic.NewForConfig(w.Config)
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create JobSet's CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// registerJobSetWebhooks registers JobSet's webhooks (as its manifests
// name them) at 127.0.0.1:port, until tb ends.
func (w *World) registerJobSetWebhooks(tb testing.TB, ctx context.Context, port int) {
	tb.Helper()
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	owned := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "jobset.sigs.k8s.io/jobset-name", Operator: metav1.LabelSelectorOpExists}}}
	hook := func(path, group, version, resource string, ops ...admissionregistrationv1.OperationType) (admissionregistrationv1.WebhookClientConfig, admissionregistrationv1.RuleWithOperations, *metav1.LabelSelector) {
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		var sel *metav1.LabelSelector
		if resource == "pods" {
			sel = owned
		}
		return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.pki.caCert},
			admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}, sel
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "testworld-jobset"}}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "testworld-jobset"}}
	for _, h := range []struct {
		name, path, group, version, resource string
		ops                                  []admissionregistrationv1.OperationType
		mutate                               bool
	}{
		{"mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets", []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, true},
		{"mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, true},
		{"vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets", []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, false},
		{"vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, false},
	} {
		cc, rule, sel := hook(h.path, h.group, h.version, h.resource, h.ops...)
		if h.mutate {
			mutating.Webhooks = append(mutating.Webhooks, admissionregistrationv1.MutatingWebhook{Name: h.name, ClientConfig: cc, Rules: []admissionregistrationv1.RuleWithOperations{rule},
				FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, ObjectSelector: sel})
		} else {
			validating.Webhooks = append(validating.Webhooks, admissionregistrationv1.ValidatingWebhook{Name: h.name, ClientConfig: cc, Rules: []admissionregistrationv1.RuleWithOperations{rule},
				FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, ObjectSelector: sel})
		}
	}
	admission := w.Client.AdmissionregistrationV1()
	if _, err := admission.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = admission.MutatingWebhookConfigurations().Delete(context.Background(), mutating.Name, metav1.DeleteOptions{})
	})
	if _, err := admission.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = admission.ValidatingWebhookConfigurations().Delete(context.Background(), validating.Name, metav1.DeleteOptions{})
	})
}
