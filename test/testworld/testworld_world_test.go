package testworld_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

var world *testworld.World

func TestMain(m *testing.M) { os.Exit(testworld.RunMain(m, &world)) }

// node adds a fake GPU node named after the test.
func node(t *testing.T, spec testworld.NodeSpec) *corev1.Node {
	t.Helper()
	return world.NodeT(t, spec)
}

func pod(name string, nodeName string, labels map[string]string) *corev1.Pod {
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "registry.invalid/trainer:1",
			}},
		},
	}
}

// waitReady waits until the pod is Running and Ready.
func waitReady(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	return world.WaitPod(t, ns, name, "Running and Ready", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && testworld.PodReady(p) })
}

func TestAnnotatedKwokNodeBecomesReady(t *testing.T) {
	testworld.Need(t)
	gpu := node(t, testworld.NodeSpec{Name: "gpu-ready-0", Pool: "a3-pool", Project: "p1", Zone: "us-east5-a"})
	tpu := node(t, testworld.NodeSpec{Name: "tpu-ready-0", Pool: "v5p-pool", TPU: true})
	for _, tc := range []struct {
		n        *corev1.Node
		res      corev1.ResourceName
		count    int64
		pool     string
		provider string
	}{
		{gpu, testworld.ResourceGPU, 8, "a3-pool", "gce://p1/us-east5-a/gpu-ready-0"},
		{tpu, testworld.ResourceTPU, 4, "v5p-pool", "gce://test-project/us-central1-a/tpu-ready-0"},
	} {
		if !testworld.NodeReady(tc.n) {
			t.Errorf("%s: not Ready: %+v", tc.n.Name, tc.n.Status.Conditions)
		}
		if q := tc.n.Status.Allocatable[tc.res]; q.Value() != tc.count {
			t.Errorf("%s: allocatable %s = %s, want %d", tc.n.Name, tc.res, q.String(), tc.count)
		}
		if got := tc.n.Labels[testworld.LabelNodePool]; got != tc.pool {
			t.Errorf("%s: pool label %q, want %q", tc.n.Name, got, tc.pool)
		}
		if tc.n.Spec.ProviderID != tc.provider {
			t.Errorf("%s: providerID %q, want %q", tc.n.Name, tc.n.Spec.ProviderID, tc.provider)
		}
		if tc.n.Status.NodeInfo.BootID == "" {
			t.Errorf("%s: no boot ID", tc.n.Name)
		}
	}
	// An unannotated node is not kwok's: it never becomes Ready.
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "not-kwok-0"}}
	if _, err := world.Client.CoreV1().Nodes().Create(testworld.Ctx(t, 10*time.Second), plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = world.Client.CoreV1().Nodes().Delete(context.Background(), "not-kwok-0", metav1.DeleteOptions{})
	})
	// By the time a second kwok node is Ready, kwok has had its chance.
	node(t, testworld.NodeSpec{Name: "gpu-ready-1"})
	got, err := world.Client.CoreV1().Nodes().Get(testworld.Ctx(t, 10*time.Second), "not-kwok-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if testworld.NodeReady(got) {
		t.Errorf("a node without the kwok annotation became Ready")
	}
}

func TestDeploymentPodsScheduledAndRunning(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	n := node(t, testworld.NodeSpec{Name: "gpu-deploy-0"})
	replicas := int32(3)
	labels := map[string]string{"app": "trainer"}
	tmpl := pod("", "", labels)
	tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{testworld.ResourceGPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{testworld.ResourceGPU: resource.MustParse("2")},
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		},
	}
	if _, err := world.Client.AppsV1().Deployments(ns).Create(testworld.Ctx(t, 10*time.Second), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 90*time.Second), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := world.Client.AppsV1().Deployments(ns).Get(ctx, "trainer", metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == replicas, nil
	})
	if err != nil {
		t.Fatalf("deployment never had %d ready replicas: %v", replicas, err)
	}
	pods, err := world.Client.CoreV1().Pods(ns).List(testworld.Ctx(t, 10*time.Second), metav1.ListOptions{LabelSelector: "app=trainer"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != int(replicas) {
		t.Fatalf("%d pods, want %d", len(pods.Items), replicas)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != n.Name || p.Status.Phase != corev1.PodRunning || !testworld.PodReady(&p) {
			t.Errorf("pod %s: node %q phase %s ready %v; want Running and Ready on %s", p.Name, p.Spec.NodeName, p.Status.Phase, testworld.PodReady(&p), n.Name)
		}
	}
}

func evict(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return c.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
}

func TestPDBStatusAndEviction(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	n := node(t, testworld.NodeSpec{Name: "gpu-pdb-0"})
	labels := map[string]string{"app": "serving"}
	for _, name := range []string{"serving-a", "serving-b"} {
		if _, err := world.Client.CoreV1().Pods(ns).Create(testworld.Ctx(t, 10*time.Second), pod(name, n.Name, labels), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ns, name)
	}
	got := world.Budget(t, ns, "serving", labels, intstr.FromInt32(1), "both pods expected", func(b *policyv1.PodDisruptionBudget) bool { return b.Status.ExpectedPods == 2 })
	if got.Status.CurrentHealthy != 2 || got.Status.DesiredHealthy != 1 || got.Status.DisruptionsAllowed != 1 {
		t.Errorf("PDB status = %+v, want 2 healthy, 1 desired, 1 disruption allowed", got.Status)
	}

	// The first eviction is allowed; the second would break the budget.
	if err := evict(testworld.Ctx(t, 10*time.Second), world.Client, ns, "serving-a"); err != nil {
		t.Fatalf("first eviction: %v, want it allowed", err)
	}
	err := evict(testworld.Ctx(t, 10*time.Second), world.Client, ns, "serving-b")
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 429 {
		t.Fatalf("second eviction: %v, want 429 Too Many Requests", err)
	}
	if !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("second eviction error %q does not name the disruption budget", err)
	}
	if _, err := world.Client.CoreV1().Pods(ns).Get(testworld.Ctx(t, 10*time.Second), "serving-b", metav1.GetOptions{}); err != nil {
		t.Errorf("serving-b after a refused eviction: %v, want it still there", err)
	}
}

func TestDeletedPodTakesItsDelay(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	n := node(t, testworld.NodeSpec{Name: "gpu-delay-0"})
	const delay = 4 * time.Second
	p := pod("checkpointing", n.Name, nil)
	grace := int64(delay / time.Second)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Annotations = map[string]string{testworld.PodDeleteDelayAnnotation: delay.String()}
	if _, err := world.Client.CoreV1().Pods(ns).Create(testworld.Ctx(t, 10*time.Second), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ns, p.Name)

	deleted := time.Now()
	if err := world.Client.CoreV1().Pods(ns).Delete(testworld.Ctx(t, 10*time.Second), p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sawTerminating := false
	var gone time.Duration
	err := wait.PollUntilContextTimeout(testworld.Ctx(t, 60*time.Second), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := world.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			gone = time.Since(deleted)
			return true, nil
		}
		if err == nil && got.DeletionTimestamp != nil {
			sawTerminating = true
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("deleted pod never went away: %v", err)
	}
	if !sawTerminating {
		t.Errorf("never saw the pod terminating (deletionTimestamp set) before it was gone")
	}
	// kwok removes the pod after the delay but never after its
	// deletionTimestamp, which has whole-second precision: with the delay
	// equal to the grace period the pod may go up to a second early.
	if gone < delay-time.Second {
		t.Errorf("pod gone %s after delete, before its %s delay", gone, delay)
	}
	t.Logf("pod with a %s delay was gone %s after delete", delay, gone.Round(100*time.Millisecond))
}

func TestPodBoundTokenCarriesNodeName(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	a := node(t, testworld.NodeSpec{Name: "gpu-token-a"})
	node(t, testworld.NodeSpec{Name: "gpu-token-b"})
	ctx := testworld.Ctx(t, 60*time.Second)
	if _, err := world.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("agent-a", a.Name, nil)
	p.Spec.ServiceAccountName = "agent"
	created, err := world.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := world.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: created.Name, UID: created.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kubernetes.NewForConfig(world.ConfigForToken(tr.Status.Token))
	if err != nil {
		t.Fatal(err)
	}
	review, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := review.Status.UserInfo
	if want := "system:serviceaccount:" + ns + ":agent"; user.Username != want {
		t.Errorf("username %q, want %q", user.Username, want)
	}
	if got := user.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != a.Name {
		t.Errorf("extra node-name = %v, want [%s]", got, a.Name)
	}
	if got := user.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != created.Name {
		t.Errorf("extra pod-name = %v, want [%s]", got, created.Name)
	}
}

// panicChildEnv makes TestPanickingTestLeavesNoProcess's child write the
// world's pids, then its directory, to the named file and panic.
const panicChildEnv = "TESTWORLD_PANIC_CHILD_PIDFILE"

func TestPanickingTestLeavesNoProcess(t *testing.T) {
	testworld.Need(t)
	if pidFile := os.Getenv(panicChildEnv); pidFile != "" {
		var lines []string
		for _, pid := range world.Pids() {
			lines = append(lines, strconv.Itoa(pid))
		}
		lines = append(lines, world.TempDir)
		if err := os.WriteFile(pidFile, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		panic("a test that panics with the world running")
	}
	if testing.Short() {
		t.Skip("starts a second world")
	}
	pidFile := t.TempDir() + "/pids"
	cmd := exec.CommandContext(testworld.Ctx(t, 3*time.Minute), os.Args[0], "-test.run=^TestPanickingTestLeavesNoProcess$")
	cmd.Env = append(os.Environ(), panicChildEnv+"="+pidFile)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a test that panics") {
		t.Fatalf("child did not panic: %v\n%s", err, out)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("child wrote no pids: %v\n%s", err, out)
	}
	pids := strings.Fields(string(data))
	if len(pids) != 6 || !strings.HasPrefix(pids[5], os.TempDir()+"/testworld-") {
		t.Fatalf("child reported %v, want the pids of 5 components and its world's directory", pids)
	}
	// A panicking test cannot remove its world's data (123 MB); this test
	// does, once the world's processes are gone.
	dir := pids[5]
	pids = pids[:5]
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	}()
	err = wait.PollUntilContextTimeout(testworld.Ctx(t, 30*time.Second), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var left []string
		for _, pid := range pids {
			if alive(pid) {
				cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				left = append(left, fmt.Sprintf("%s %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
			}
		}
		t.Errorf("processes left after the child panicked: %v", left)
	}
}

// alive reports whether pid runs (a zombie awaiting its reaper is dead).
func alive(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestCriticalPodsNeedAQuotaAsOnGKE: the API server limits the critical
// priority classes as GKE's does. A pod at system-node-critical is refused
// in a namespace without a quota for its class, with the answer a
// DaemonSet's events carry on GKE, and created once a quota names the
// class; kube-system has GKE's own quota; a pod of no class needs none.
func TestCriticalPodsNeedAQuotaAsOnGKE(t *testing.T) {
	testworld.Need(t)
	ns := world.Namespace(t)
	critical := func(name, class string) *corev1.Pod {
		p := pod(name, "", nil)
		p.Spec.PriorityClassName = class
		return p
	}
	pods := world.Client.CoreV1().Pods(ns)
	for _, class := range testworld.CriticalPriorityClasses {
		_, err := pods.Create(testworld.Ctx(t, 10*time.Second), critical("refused-"+class, class), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
			t.Errorf("a pod at %s in a namespace without a quota for it: %v, want refused for want of a quota", class, err)
		}
	}
	if _, err := pods.Create(testworld.Ctx(t, 10*time.Second), pod("classless", "", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("a pod of no priority class: %v, want created", err)
	}
	q, err := world.Client.CoreV1().ResourceQuotas(metav1.NamespaceSystem).Get(testworld.Ctx(t, 10*time.Second), testworld.GKECriticalPodsQuota, metav1.GetOptions{})
	if err != nil || q.Spec.ScopeSelector == nil || len(q.Spec.ScopeSelector.MatchExpressions) != 1 {
		t.Fatalf("kube-system's quota for critical pods: %v %+v", err, q)
	}
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "critical-pods", Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}, ScopeSelector: q.Spec.ScopeSelector},
	}
	if _, err := world.Client.CoreV1().ResourceQuotas(ns).Create(testworld.Ctx(t, 10*time.Second), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, class := range testworld.CriticalPriorityClasses {
		if _, err := pods.Create(testworld.Ctx(t, 10*time.Second), critical("admitted-"+class, class), metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod at %s in a namespace with a quota for it: %v, want created", class, err)
		}
	}
}
