package testworld

import (
	"context"
	"io"
	"testing"
	"time"
)

// KubectlDir is the directory that holds (or will hold) kubectl at
// KubernetesVersion, in bin/: a sibling of Dir, built once per machine.
func KubectlDir() (string, error) {
	return siblingDir("kubectl", KubernetesVersion)
}

// BuildKubectl compiles kubectl from k8s.io/kubernetes at KubernetesVersion
// into dir unless it is there (a few minutes on two cores, once; the
// benchmarks that compare a drain with kubectl's build it when they first
// run, so make test never waits for it).
func BuildKubectl(ctx context.Context, dir string, progress io.Writer) error {
	return buildSteps(ctx, dir, progress, "kubectl", "building kubectl "+KubernetesVersion+" into "+dir,
		func(b builder) []buildStep {
			return []buildStep{{"kubectl " + KubernetesVersion, func(ctx context.Context) error {
				return b.scratchBuild(ctx, "k8s.io/kubernetes", KubernetesVersion, StagingVersion, kubernetesLDFlags(),
					map[string]string{"k8s.io/kubernetes/cmd/kubectl": "kubectl"})
			}}}
		})
}

// Kubectl is the path of kubectl at KubernetesVersion, built first if this
// machine has none; under -short a benchmark that needs it is skipped
// until it is built.
func Kubectl(tb testing.TB) string {
	tb.Helper()
	return kubectl.path(tb, "kubectl", KubectlDir, "go run ./test/cmd/testworld build-kubectl", 30*time.Minute, BuildKubectl)
}

var kubectl builtOnce
