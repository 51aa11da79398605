package testworld

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// TestProductBinariesNeverRunAsTheAdmin: the world refuses to start the
// agent or the aggregator with the admin's kubeconfig (or a copy of it, or
// none); their shipped identities, another program with the admin's, and
// a kubelet's certificate are started.
func TestProductBinariesNeverRunAsTheAdmin(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := func(name string, cfg *rest.Config) string {
		path := filepath.Join(dir, name)
		if err := WriteKubeconfig(path, cfg); err != nil {
			t.Fatal(err)
		}
		return path
	}
	base := &rest.Config{Host: "https://127.0.0.1:6443"}
	admin := rest.CopyConfig(base)
	admin.BearerToken = adminToken
	shipped := rest.CopyConfig(base)
	shipped.BearerToken = "a-service-account-token"
	adminPath, adminCopy, shippedPath := kubeconfig("admin", admin), kubeconfig("copied", admin), kubeconfig("shipped", shipped)
	for _, tc := range []struct {
		name    string
		bin     string
		args    []string
		env     []string
		refused bool
	}{
		{"the agent as the admin", "/tmp/bins/agent", []string{"--kubeconfig", adminPath, "--node-name", "n"}, nil, true},
		{"the aggregator as the admin, flag=value", "/tmp/bins/aggregator", []string{"--kubeconfig=" + adminPath}, nil, true},
		{"the aggregator with a copy of the admin's kubeconfig", "aggregator", []string{"--kubeconfig", adminCopy}, nil, true},
		{"the agent by $KUBECONFIG", "agent", nil, []string{"KUBECONFIG=" + adminPath}, true},
		{"the aggregator with no kubeconfig", "aggregator", []string{"--namespace", "x"}, nil, true},
		{"the agent with its shipped identity", "agent", []string{"--kubeconfig", shippedPath}, nil, false},
		{"the aggregator with its shipped identity by $KUBECONFIG", "aggregator", nil, []string{"KUBECONFIG=" + shippedPath}, false},
		{"another program as the admin", "kwok", []string{"--kubeconfig", adminPath}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refuseAdmin(tc.bin, tc.args, tc.env)
			if got := errors.Is(err, ErrAdminIdentity); got != tc.refused {
				t.Errorf("refused %t (%v), want %t", got, err, tc.refused)
			}
		})
	}
	w := &World{TempDir: dir}
	if _, err := w.StartProcess("agent-as-admin", "/tmp/bins/agent", "--kubeconfig", adminPath); !errors.Is(err, ErrAdminIdentity) {
		t.Errorf("StartProcess of the agent as the admin: %v, want ErrAdminIdentity", err)
	}
	if _, err := w.StartProcessEnv("aggregator-as-admin", []string{"KUBECONFIG=" + adminPath}, "aggregator"); !errors.Is(err, ErrAdminIdentity) {
		t.Errorf("StartProcessEnv of the aggregator as the admin: %v, want ErrAdminIdentity", err)
	}
}

// TestNoTestRunsAProductBinaryAroundTheWorld: a test that runs the agent
// or the aggregator itself does so through StartProcess or ProductCommand,
// which refuse the admin's identity, never through os/exec directly.
func TestNoTestRunsAProductBinaryAroundTheWorld(t *testing.T) {
	root, err := ModuleRoot(Ctx(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	direct := regexp.MustCompile(`exec\.Command(Context)?\([^)]*(buildAgent|AgentBin|"agent"|"aggregator"|aggregatorBin)`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return cmp.Or(err, filepath.SkipDir)
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "identity.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if direct.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d runs a product binary with os/exec: use World.StartProcess or ProductCommand", rel, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorldInstallsThePoliciesOfTheProductsIdentities: of the shipped
// admission policies, the world installs those that select the product's
// service accounts (and their bindings), not those that hold everyone
// else, which would hold the tests' own admin too.
func TestWorldInstallsThePoliciesOfTheProductsIdentities(t *testing.T) {
	policy := func(name, condition string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": "ValidatingAdmissionPolicy", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"matchConditions": []any{map[string]any{"name": "c", "expression": condition}}}}}
	}
	binding := func(policy string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": "ValidatingAdmissionPolicyBinding", "metadata": map[string]any{"name": policy},
			"spec": map[string]any{"policyName": policy}}}
	}
	role := &unstructured.Unstructured{Object: map[string]any{"kind": "ClusterRole", "metadata": map[string]any{"name": "r"}}}
	objs := []*unstructured.Unstructured{
		policy("agent-own-node", `request.userInfo.username == "system:serviceaccount:maintenance-handler:maintenance-handler-agent"`), binding("agent-own-node"),
		policy("events-pinned", `!(request.userInfo.username in ["system:serviceaccount:maintenance-handler:maintenance-handler-agent"])`), binding("events-pinned"),
		policy("node-identity", `request.userInfo.username.startsWith("system:node:")`), binding("node-identity"),
		role,
	}
	var got []string
	for _, o := range ownPolicies(objs) {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	want := []string{"ValidatingAdmissionPolicy/agent-own-node", "ValidatingAdmissionPolicyBinding/agent-own-node", "ClusterRole/r"}
	if !slices.Equal(got, want) {
		t.Errorf("installed %v, want %v", got, want)
	}
}
