// Command release writes one version's release artefacts into one folder
// (make release VERSION=vX.Y.Z):
//
//	image/                               the image of the agent and the aggregator for
//	                                     linux/amd64 and linux/arm64, an OCI image layout
//	                                     (make image; push it with crane push --index)
//	maintenance-handler-X.Y.Z.tgz        the Helm chart, its version and appVersion stamped,
//	                                     installing the release's image by default
//	maintenance-handler.yaml             the kustomize base in one file for kubectl apply,
//	                                     with the release's image
//	kubectl-gce_maintenance_OS_ARCH.tar.gz   the kubectl plugin for linux and darwin, amd64 and arm64
//	krew/gce-maintenance.yaml                the krew manifest (.krew.yaml) pointing at those archives
//	CHANGELOG.md                         the version's entry of CHANGELOG.md
//	sbom/BINARY_OS_ARCH.spdx.json        the Go modules linked into each binary, as SPDX 2.3
//	SHA256SUMS                           every file above, for sha256sum -c
//
// Every binary reports the version (--version), the image carries it as
// its org.opencontainers.image.version label, and the chart as its
// appVersion (the image tag it installs). The folder is replaced.
//
// It builds with the Go toolchain only: no container engine, no helm. The
// chart archive is what helm package writes: the chart's folder, less
// what .helmignore names, under the chart's name, gzipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
)

// Release is one run: where the sources are, what it writes and as which
// version.
type Release struct {
	Root    string // the module's root
	Out     string // the folder written
	Version string // vMAJOR.MINOR.PATCH[-PRERELEASE]
	Image   string // the image's repository, as a manifest names it
	// Platforms of the plugin, os/arch.
	PluginPlatforms []string
}

// PluginPlatforms are the platforms the plugin is released for.
var PluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r := Release{Root: ".", PluginPlatforms: PluginPlatforms}
	flag.StringVar(&r.Version, "version", "", "the release's version, vMAJOR.MINOR.PATCH[-PRERELEASE]")
	flag.StringVar(&r.Out, "o", "", "the folder to write (replaced); default _output/release/VERSION")
	flag.StringVar(&r.Image, "image", "maintenance-handler", "the image's repository, without the tag, that the all-in-one YAML names and the chart installs by default")
	flag.Parse()
	if r.Out == "" {
		r.Out = filepath.Join("_output", "release", r.Version)
	}
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	fmt.Println("release:", r.Out)
}

// imageRepository is what a repository may look like: a registry host,
// then lower-case path components.
var imageRepository = regexp.MustCompile(`^([a-zA-Z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// Validate reports every problem with r at once.
func (r Release) Validate() error {
	var problems []string
	if !semver.IsValid(r.Version) || semver.Build(r.Version) != "" || semver.Canonical(r.Version) != r.Version {
		problems = append(problems, fmt.Sprintf("-version %q: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE", r.Version))
	}
	if !imageRepository.MatchString(r.Image) {
		problems = append(problems, fmt.Sprintf("-image %q: want a repository such as registry.example.com/maintenance-handler, without a tag", r.Image))
	}
	if r.Out == "" || filepath.Clean(r.Out) == "." || filepath.Clean(r.Out) == "/" {
		problems = append(problems, fmt.Sprintf("-o %q: want a folder of its own, which is replaced", r.Out))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// ChartVersion is the chart's version for a release: semver without the v.
func (r Release) ChartVersion() string { return strings.TrimPrefix(r.Version, "v") }

// Run writes every artefact into r.Out.
func (r Release) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	// The entry is read first: a release with nothing to say stops before
	// it builds anything.
	entry, err := changelogEntry(filepath.Join(r.Root, "CHANGELOG.md"), r.Version)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(r.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(r.Out, "sbom"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.Out, "CHANGELOG.md"), []byte(entry), 0o644); err != nil {
		return err
	}
	steps := []struct {
		name string
		do   func(context.Context) error
	}{
		{"image", r.image},
		{"chart", r.chart},
		{"all-in-one YAML", r.allInOne},
		{"kubectl plugin", r.plugin},
		{"krew manifest", r.krew},
	}
	for _, s := range steps {
		fmt.Fprintln(os.Stderr, "release:", s.name)
		if err := s.do(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return writeChecksums(r.Out)
}
