package testworld

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/sys/unix"
)

// Pinned versions of the test world. Changing one changes the cache key, so
// a machine keeps one built world per combination and reuses it.
const (
	// NewestKubernetes and OldestKubernetes are the newest and the oldest
	// Kubernetes the project supports (the chart's kubeVersion, the
	// README's table): the world runs the newest unless KubernetesEnv
	// names another, and make test runs the tests that depend on the API
	// server's version on the oldest as well.
	NewestKubernetes = "v1.37.2"
	OldestKubernetes = "v1.34.4"
	EtcdVersion      = "v3.6.16"
	KwokVersion      = "v0.8.0"
)

// KubernetesEnv names the Kubernetes release (vX.Y.Z) the test world runs
// and builds, where not NewestKubernetes: make test sets it to
// OldestKubernetes for its second pass.
const KubernetesEnv = "MH_TESTWORLD_KUBERNETES"

// KubernetesVersion is the Kubernetes release of this process's world;
// StagingVersion is the version of every k8s.io staging module that
// replaces the ./staging/src paths of k8s.io/kubernetes's go.mod at that
// release (v0.Y.Z for v1.Y.Z). versionErr says why KubernetesEnv names no
// release; Dir returns it.
var KubernetesVersion, StagingVersion, versionErr = kubernetesRelease(os.Getenv(KubernetesEnv))

// kubernetesRelease is the release named by v (NewestKubernetes when
// empty) and its staging modules' version.
func kubernetesRelease(v string) (release, staging string, err error) {
	if v == "" {
		v = NewestKubernetes
	}
	var minor, patch int
	if n, _ := fmt.Sscanf(v, "v1.%d.%d", &minor, &patch); n != 2 || fmt.Sprintf("v1.%d.%d", minor, patch) != v {
		return "", "", fmt.Errorf("%s=%q: want a Kubernetes release, such as %s", KubernetesEnv, v, OldestKubernetes)
	}
	return v, fmt.Sprintf("v0.%d.%d", minor, patch), nil
}

// Minor is the minor of the world's Kubernetes (37 for v1.37.2).
func Minor() int {
	var minor int
	fmt.Sscanf(KubernetesVersion, "v1.%d.", &minor) //nolint:errcheck // checked by kubernetesRelease
	return minor
}

// Binary names inside the bin directory of a built world.
const (
	binAPIServer         = "kube-apiserver"
	binControllerManager = "kube-controller-manager"
	binScheduler         = "kube-scheduler"
	binEtcd              = "etcd"
	binKwok              = "kwok"
)

// completeMarker is written last by Build; a directory without it is a
// partial build and is rebuilt.
const completeMarker = ".complete"

// CacheEnv overrides the directory under which built worlds are cached.
const CacheEnv = "MH_TESTWORLD_CACHE"

// Key names one combination of pinned versions and the platform.
func Key() string {
	return fmt.Sprintf("k8s-%s_etcd-%s_kwok-%s_%s-%s",
		KubernetesVersion, EtcdVersion, KwokVersion, runtime.GOOS, runtime.GOARCH)
}

// Dir is the directory that holds (or will hold) the built world: bin/ with
// the five binaries and stages/ with kwok's Stage documents. It lives outside
// the repository: $MH_TESTWORLD_CACHE, else the user cache directory.
func Dir() (string, error) {
	if versionErr != nil {
		return "", versionErr
	}
	root := os.Getenv(CacheEnv)
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("find cache directory: %w", err)
		}
		root = filepath.Join(cache, "maintenance-handler", "testworld")
	}
	return filepath.Join(root, Key()), nil
}

// ErrNotBuilt is returned when the world has not been built on this machine.
var ErrNotBuilt = errors.New("test world is not built: run `make testworld`")

// Built reports whether dir holds a complete build.
func Built(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, completeMarker))
	return err == nil
}

// Build compiles the test world into dir unless it is already there. It
// holds a file lock so that concurrent callers build once. Progress goes to
// progress, one line per step, so that a cold build (about a quarter of an
// hour on two cores) never sits silent.
func Build(ctx context.Context, dir string, progress io.Writer) error {
	return buildSteps(ctx, dir, progress, "test world",
		fmt.Sprintf("cold build into %s (kubernetes %s, etcd %s, kwok %s); this takes a while on a small machine", dir, KubernetesVersion, EtcdVersion, KwokVersion),
		func(b builder) []buildStep {
			return []buildStep{
				{"kwok " + KwokVersion, b.kwok},
				{"kwok stages", func(ctx context.Context) error { return b.stages(ctx, filepath.Join(dir, "stages")) }},
				{"etcd " + EtcdVersion, b.etcd},
				{"kube-apiserver, kube-controller-manager, kube-scheduler " + KubernetesVersion, b.kubernetes},
			}
		})
}

// buildStep is one step of a build.
type buildStep struct {
	name string
	fn   func(context.Context) error
}

// buildSteps runs what is built into dir (its bin folder), unless a
// complete build is there: under a file lock, so that concurrent callers
// build once, one progress line per step, the complete marker last.
func buildSteps(ctx context.Context, dir string, progress io.Writer, what, intro string, steps func(builder) []buildStep) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("take build lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck // released on close anyway
	if Built(dir) {
		fmt.Fprintf(progress, "testworld: reusing %s\n", dir)
		return nil
	}
	start := time.Now()
	fmt.Fprintf(progress, "testworld: %s\n", intro)
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", bin, err)
	}
	list := steps(builder{progress: progress, bin: bin})
	for i, s := range list {
		stepStart := time.Now()
		fmt.Fprintf(progress, "testworld: [%s %d/%d] building %s\n", what, i+1, len(list), s.name)
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("build %s: %w", s.name, err)
		}
		fmt.Fprintf(progress, "testworld: [%s %d/%d] %s done in %s\n", what, i+1, len(list), s.name, time.Since(stepStart).Round(time.Second))
	}
	if err := os.WriteFile(filepath.Join(dir, completeMarker), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark build complete: %w", err)
	}
	fmt.Fprintf(progress, "testworld: %s built in %s\n", what, time.Since(start).Round(time.Second))
	return nil
}

type builder struct {
	progress io.Writer
	bin      string
}

// goCmd runs the go tool in dir with env added to the environment.
func (b builder) goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(out.String(), 4000))
	}
	return nil
}

func (b builder) kwok(ctx context.Context) error {
	tmp, err := os.MkdirTemp("", "testworld-kwok-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := b.goCmd(ctx, tmp, []string{"GOBIN=" + b.bin}, "install", "-ldflags=-s -w", "sigs.k8s.io/kwok/cmd/kwok@"+KwokVersion); err != nil {
		return err
	}
	return nil
}

// stages copies the Stage documents that ship in the kwok module: node
// initialisation and heartbeat, and the general pod lifecycle (create,
// ready, complete, delete with the per-pod delay annotation).
func (b builder) stages(ctx context.Context, dst string) error {
	modDir, err := ModuleDir(ctx, "sigs.k8s.io/kwok@"+KwokVersion)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	src := filepath.Join(modDir, "kustomize", "stage")
	files := []string{
		"node/fast/node-initialize.yaml",
		"node/heartbeat/node-heartbeat.yaml",
	}
	podFiles, err := filepath.Glob(filepath.Join(src, "pod", "general", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range podFiles {
		rel, _ := filepath.Rel(src, f)
		if filepath.Base(rel) == "kustomization.yaml" {
			continue
		}
		files = append(files, rel)
	}
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return fmt.Errorf("read stage %s: %w", rel, err)
		}
		name := strings.ReplaceAll(rel, string(filepath.Separator), "_")
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return fmt.Errorf("write stage %s: %w", name, err)
		}
	}
	return nil
}

func (b builder) etcd(ctx context.Context) error {
	// etcd's server module replaces its sibling modules with local paths;
	// restate them at the same version.
	return b.scratchBuild(ctx, "go.etcd.io/etcd/server/v3", EtcdVersion, EtcdVersion,
		"-s -w", map[string]string{"go.etcd.io/etcd/server/v3": binEtcd})
}

// kubernetes builds the three control-plane binaries from k8s.io/kubernetes,
// whose go.mod replaces every staging module with ./staging/src; each is
// restated as the same path at StagingVersion.
func (b builder) kubernetes(ctx context.Context) error {
	return b.scratchBuild(ctx, "k8s.io/kubernetes", KubernetesVersion, StagingVersion, kubernetesLDFlags(), map[string]string{
		"k8s.io/kubernetes/cmd/kube-apiserver":          binAPIServer,
		"k8s.io/kubernetes/cmd/kube-controller-manager": binControllerManager,
		"k8s.io/kubernetes/cmd/kube-scheduler":          binScheduler,
	})
}

// kubernetesLDFlags strip the binaries and give them the world's version
// (else a Node reports v0.0.0-master).
func kubernetesLDFlags() string {
	return fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%d",
		KubernetesVersion, Minor())
}

// scratchBuild builds main packages of module mod@version in a scratch
// module that requires it and copies its replace directives, turning each
// local-path replacement into the same module path at localVersion (the go
// tool ignores a dependency's replace directives, so they are restated).
// pkgs maps package paths to binary names in the bin directory.
func (b builder) scratchBuild(ctx context.Context, mod, version, localVersion, ldflags string, pkgs map[string]string) error {
	work, err := os.MkdirTemp("", "testworld-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	gomodPath, err := moduleGoMod(ctx, mod+"@"+version)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(gomodPath)
	if err != nil {
		return err
	}
	upstream, err := modfile.Parse(gomodPath, data, nil)
	if err != nil {
		return fmt.Errorf("parse %s go.mod: %w", mod, err)
	}
	mf := &modfile.File{}
	if err := mf.AddModuleStmt("testworld.invalid/build"); err != nil {
		return err
	}
	if err := mf.AddGoStmt("1.26"); err != nil {
		return err
	}
	if err := mf.AddRequire(mod, version); err != nil {
		return err
	}
	required := map[string]bool{}
	for _, r := range upstream.Require {
		required[r.Mod.Path] = true
	}
	for _, r := range upstream.Replace {
		newPath, newVersion := r.New.Path, r.New.Version
		if modfile.IsDirectoryPath(newPath) {
			if !required[r.Old.Path] {
				continue // a guard such as "=> ./FORBIDDEN_DEPENDENCY"
			}
			newPath, newVersion = r.Old.Path, localVersion
		}
		if err := mf.AddReplace(r.Old.Path, r.Old.Version, newPath, newVersion); err != nil {
			return err
		}
	}
	out, err := mf.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "go.mod"), out, 0o644); err != nil {
		return err
	}
	paths := make([]string, 0, len(pkgs))
	for p := range pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
	for _, p := range paths {
		fmt.Fprintf(&tools, "\t_ %q\n", p)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(work, "tools.go"), []byte(tools.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b.progress, "testworld:       resolving modules of %s\n", mod)
	if err := b.goCmd(ctx, work, nil, "mod", "tidy"); err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintf(b.progress, "testworld:       compiling %s\n", pkgs[p])
		if err := b.goCmd(ctx, work, nil, "build", "-ldflags="+ldflags, "-o", filepath.Join(b.bin, pkgs[p]), p); err != nil {
			return err
		}
	}
	return nil
}

type modInfo struct {
	Dir   string
	GoMod string
	Error string
}

func download(ctx context.Context, modAtVersion string) (modInfo, error) {
	tmp, err := os.MkdirTemp("", "testworld-dl-")
	if err != nil {
		return modInfo{}, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modAtVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info modInfo
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" {
		return modInfo{}, fmt.Errorf("go mod download %s: %v %s %s", modAtVersion, err, info.Error, tail(string(out), 2000))
	}
	return info, nil
}

// ModuleDir downloads a module version through the Go module proxy (once;
// the module cache keeps it) and returns the directory holding its files.
func ModuleDir(ctx context.Context, modAtVersion string) (string, error) {
	info, err := download(ctx, modAtVersion)
	return info.Dir, err
}

func moduleGoMod(ctx context.Context, modAtVersion string) (string, error) {
	info, err := download(ctx, modAtVersion)
	return info.GoMod, err
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
