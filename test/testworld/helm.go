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
	return siblingDir("helm", HelmVersion)
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
	return helm.path(tb, "helm", HelmDir, "make testworld builds it", 20*time.Minute, BuildHelm)
}

var helm builtOnce

// siblingDir is the directory of name at version for this platform, a
// sibling of Dir: a machine builds it once.
func siblingDir(name, version string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(dir), fmt.Sprintf("%s-%s_%s-%s", name, version, runtime.GOOS, runtime.GOARCH)), nil
}

// builtOnce is a binary this process builds (or finds built) once, for
// every test that needs it.
type builtOnce struct {
	once sync.Once
	err  error
}

// path is the path of the binary name in dirOf's bin folder, built with
// build first if this machine has none (within timeout); under -short it
// skips tb, saying how to build it, until it is built.
func (b *builtOnce) path(tb testing.TB, name string, dirOf func() (string, error), howToBuild string, timeout time.Duration,
	build func(ctx context.Context, dir string, progress io.Writer) error) string {
	tb.Helper()
	dir, err := dirOf()
	if err != nil {
		tb.Fatal(err)
	}
	if testing.Short() && !Built(dir) {
		tb.Skip(name + " is not built yet (" + howToBuild + "); -short builds nothing")
	}
	b.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		b.err = build(ctx, dir, os.Stderr)
	})
	if b.err != nil {
		tb.Fatalf("%s: %v", name, b.err)
	}
	return filepath.Join(dir, "bin", name)
}
