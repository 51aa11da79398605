package testworld

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// HelmVersion is the Helm the chart is linted, rendered and installed with
// (Helm 3's support ended in November 2026).
const HelmVersion = "v4.3.1"

// HelmDir is the directory that holds (or will hold) the built helm
// binary, in bin/: a sibling of Dir, so that a machine builds it once.
func HelmDir() (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dir), fmt.Sprintf("helm-%s_%s-%s", HelmVersion, runtime.GOOS, runtime.GOARCH)), nil
}

// BuildHelm compiles helm at HelmVersion from the module proxy into dir
// unless it is there (about four minutes on two cores, once).
func BuildHelm(ctx context.Context, dir string, progress io.Writer) error {
	return buildSteps(ctx, dir, progress, "helm", "building helm "+HelmVersion+" into "+dir,
		func(b builder) []buildStep {
			return []buildStep{{"helm " + HelmVersion, func(ctx context.Context) error {
				tmp, err := os.MkdirTemp("", "testworld-helm-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				return b.goCmd(ctx, tmp, []string{"GOBIN=" + b.bin}, "install", "-ldflags=-s -w", "helm.sh/helm/v4/cmd/helm@"+HelmVersion)
			}}}
		})
}

// Helm is the path of the pinned helm binary, built first if this machine
// has none; under -short a test that needs it is skipped until it is
// built.
func Helm(tb testing.TB) string {
	tb.Helper()
	dir, err := HelmDir()
	if err != nil {
		tb.Fatal(err)
	}
	if testing.Short() && !Built(dir) {
		tb.Skip("helm is not built yet (make testworld builds it); -short builds nothing")
	}
	helm.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		helm.err = BuildHelm(ctx, dir, os.Stderr)
	})
	if helm.err != nil {
		tb.Fatalf("helm: %v", helm.err)
	}
	return filepath.Join(dir, "bin", "helm")
}

// helm is this process's one build (or reuse) of helm.
var helm struct {
	once sync.Once
	err  error
}
