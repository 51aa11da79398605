package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// testVersion is the version the test releases: the first release's
// candidate, whose notes are the first release's CHANGELOG entry.
const testVersion = "v0.1.0-rc.1"

// testChartVersion is the chart's version for testVersion.
const testChartVersion = "0.1.0-rc.1"

// TestReleaseWritesEveryArtefact runs make release for a test version, as
// a user runs it, and checks each artefact: the checksums, the image's
// platforms, label and binaries, the chart (linted and rendered by the
// pinned helm from the archive), the all-in-one YAML, each plugin archive
// and the krew manifest's checksums of them, the changelog entry and an
// SBOM per binary that lists what the binary links.
func TestReleaseWritesEveryArtefact(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and the plugin for every platform")
	}
	testworld.TakeTurns(t, "cross-build")
	out := filepath.Join(t.TempDir(), "release")
	// As a user runs it, into the test's own folder.
	cmd := exec.Command("make", "release", "VERSION="+testVersion, "IMAGE=registry.example.com/gpu/maintenance-handler", "RELEASE_DIR="+out)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release: %v\n%s", err, b)
	}
	files := checkSums(t, out)

	t.Run("image", func(t *testing.T) {
		idx, err := layout.ImageIndexFromPath(filepath.Join(out, "image"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, d := range m.Manifests {
			platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if v := cf.Config.Labels["org.opencontainers.image.version"]; v != testVersion {
				t.Errorf("%s: the image's version label is %q", d.Platform, v)
			}
			for _, bin := range []string{"agent", "aggregator"} {
				checkSBOM(t, out, bin, d.Platform.OS, d.Platform.Architecture, "k8s.io/apimachinery")
			}
		}
		slices.Sort(platforms)
		if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
			t.Errorf("the image is for %v, want %v", platforms, want)
		}
	})

	t.Run("plugin", func(t *testing.T) {
		for _, p := range PluginPlatforms {
			goos, goarch, _ := strings.Cut(p, "/")
			bin := untar(t, filepath.Join(out, PluginArchive(goos, goarch)))["kubectl-gce_maintenance"]
			if bin == nil || bin.Mode&0o111 == 0 {
				t.Fatalf("%s: the archive holds no executable kubectl-gce_maintenance at its root", p)
			}
			if untar(t, filepath.Join(out, PluginArchive(goos, goarch)))["LICENSE"] == nil {
				t.Errorf("%s: the archive holds no LICENSE", p)
			}
			if c := untar(t, filepath.Join(out, PluginArchive(goos, goarch)))["kubectl_complete-gce_maintenance"]; c == nil || c.Mode&0o111 == 0 ||
				!strings.Contains(string(c.body), "kubectl gce-maintenance __complete") {
				t.Errorf("%s: the archive holds no executable kubectl_complete-gce_maintenance asking the plugin's completion", p)
			}
			checkArch(t, p, bin.body)
			if goos == runtime.GOOS && goarch == runtime.GOARCH {
				path := filepath.Join(t.TempDir(), "kubectl-gce_maintenance")
				if err := os.WriteFile(path, bin.body, 0o755); err != nil {
					t.Fatal(err)
				}
				if b, err := exec.Command(path, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "maintenance-handler kubectl-gce_maintenance "+testVersion {
					t.Errorf("kubectl-gce_maintenance --version: %q %v", b, err)
				}
			}
			checkSBOM(t, out, "kubectl-gce_maintenance", goos, goarch, "github.com/spf13/cobra")
		}
	})

	t.Run("krew", func(t *testing.T) {
		var plugin struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Version          string `json:"version"`
				Homepage         string `json:"homepage"`
				ShortDescription string `json:"shortDescription"`
				Description      string `json:"description"`
				Caveats          string `json:"caveats"`
				Platforms        []struct {
					Selector struct{ MatchLabels map[string]string } `json:"selector"`
					URI      string                                  `json:"uri"`
					SHA256   string                                  `json:"sha256"`
					Bin      string                                  `json:"bin"`
				} `json:"platforms"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict(files["krew/gce-maintenance.yaml"], &plugin); err != nil {
			t.Fatalf("krew/gce-maintenance.yaml: %v", err)
		}
		if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "gce-maintenance" || plugin.Spec.Version != testVersion {
			t.Errorf("the krew manifest is %s %s %q at version %q", plugin.APIVersion, plugin.Kind, plugin.Metadata.Name, plugin.Spec.Version)
		}
		var seen []string
		for _, p := range plugin.Spec.Platforms {
			l := p.Selector.MatchLabels
			archive := PluginArchive(l["os"], l["arch"])
			seen = append(seen, l["os"]+"/"+l["arch"])
			sum := sha256.Sum256(files[archive])
			if files[archive] == nil || p.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("%s: sha256 %s is not that of %s", archive, p.SHA256, archive)
			}
			if want := "https://github.com/maintenance-handler/maintenance-handler/releases/download/" + testVersion + "/" + archive; p.URI != want || p.Bin != "kubectl-gce_maintenance" {
				t.Errorf("%s: uri %s bin %s, want %s", archive, p.URI, p.Bin, want)
			}
		}
		slices.Sort(seen)
		want := slices.Sorted(slices.Values(PluginPlatforms))
		if !slices.Equal(seen, want) {
			t.Errorf("the krew manifest has platforms %v, want %v", seen, want)
		}
	})

	t.Run("chart", func(t *testing.T) {
		archive := filepath.Join(out, ChartArchive(testChartVersion))
		chart := untar(t, archive)
		meta := chart["maintenance-handler/Chart.yaml"]
		if meta == nil {
			t.Fatalf("the chart archive has no maintenance-handler/Chart.yaml: %v", slices.Sorted(maps.Keys(chart)))
		}
		var c struct{ Version, AppVersion string }
		if err := yaml.Unmarshal(meta.body, &c); err != nil || c.Version != testChartVersion || c.AppVersion != testVersion {
			t.Errorf("the chart's version %q appVersion %q (%v), want %s and %s", c.Version, c.AppVersion, err, testChartVersion, testVersion)
		}
		for _, must := range []string{"values.yaml", "values.schema.json", "README.md", "templates/agent-daemonset.yaml", "LICENSE"} {
			if chart["maintenance-handler/"+must] == nil {
				t.Errorf("the chart archive has no %s", must)
			}
		}
		helm := testworld.Helm(t)
		if b, err := exec.Command(helm, "lint", "--strict", archive).CombinedOutput(); err != nil {
			t.Errorf("helm lint --strict %s: %v\n%s", archive, err, b)
		}
		// As a user installs it, setting nothing: the release's image.
		b, err := exec.Command(helm, "template", "mh", archive).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, b)
		}
		images := regexp.MustCompile(`(?m)^\s*image: (.*)$`).FindAllStringSubmatch(string(b), -1)
		for _, image := range images {
			if want := "registry.example.com/gpu/maintenance-handler:" + testVersion; image[1] != want {
				t.Errorf("the chart installs the image %s, want the release's, %s", image[1], want)
			}
		}
		if len(images) < 2 {
			t.Errorf("the chart names %d images, want the agent's and the aggregator's", len(images))
		}
	})

	t.Run("all-in-one", func(t *testing.T) {
		docs := strings.Split(string(files[AllInOne]), "\n---\n")
		kinds := map[string]int{}
		for _, d := range docs {
			var o struct {
				Kind     string
				Metadata struct{ Labels map[string]string }
			}
			if err := yaml.Unmarshal([]byte(d), &o); err != nil {
				t.Fatal(err)
			}
			kinds[o.Kind]++
			if o.Metadata.Labels["app.kubernetes.io/version"] != testVersion {
				t.Errorf("a %s has no version label", o.Kind)
			}
		}
		for _, k := range []string{"Namespace", "DaemonSet", "Deployment", "ValidatingAdmissionPolicy", "ClusterRole"} {
			if kinds[k] == 0 {
				t.Errorf("the all-in-one YAML has no %s: %v", k, kinds)
			}
		}
		if n := strings.Count(string(files[AllInOne]), "image: registry.example.com/gpu/maintenance-handler:"+testVersion+"\n"); n != 2 {
			t.Errorf("the release's image is named %d times, want by the agent and the aggregator", n)
		}
	})

	t.Run("changelog", func(t *testing.T) {
		entry := string(files["CHANGELOG.md"])
		if !strings.HasPrefix(entry, "## "+testVersion+"\n\nUpgrading:") || !strings.Contains(entry, "\n### Added\n") {
			t.Errorf("the CHANGELOG entry is not v0.1.0's: %q", entry)
		}
	})

	// What the tag's workflow publishes is what make release wrote.
	t.Run("workflow", func(t *testing.T) { checkWorkflowPublishes(t, out) })

	// A second run writes the same bytes: anyone can check a release
	// against its tag.
	t.Run("reproducible", func(t *testing.T) {
		again := filepath.Join(t.TempDir(), "release")
		cmd := exec.Command("make", "release", "VERSION="+testVersion, "IMAGE=registry.example.com/gpu/maintenance-handler", "RELEASE_DIR="+again)
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release: %v\n%s", err, b)
		}
		if d := sameRelease(t, out, again); d != "" {
			t.Errorf("make release twice wrote different releases:\n%s", d)
		}
	})
}

// checkSums checks that SHA256SUMS lists every other file of dir with its
// sum, and returns the files by path.
func checkSums(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(files["SHA256SUMS"]))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		got := sha256.Sum256(files[name])
		if !ok || files[name] == nil || sum != hex.EncodeToString(got[:]) {
			t.Errorf("SHA256SUMS: %q does not match a file", sc.Text())
		}
		listed[name] = true
	}
	for name := range files {
		if name != "SHA256SUMS" && !listed[name] {
			t.Errorf("SHA256SUMS does not list %s", name)
		}
	}
	if len(listed) < 10 {
		t.Errorf("SHA256SUMS lists %d files", len(listed))
	}
	return files
}

// checkSBOM checks the SPDX document of binary: its root is the module at
// the release's version, it depends on the toolchain and on dep at the
// version go.mod requires.
func checkSBOM(t *testing.T, dir, binary, goos, goarch, dep string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, SBOMName(binary, goos, goarch)))
	if err != nil {
		t.Error(err)
		return
	}
	var doc SBOM
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", SBOMName(binary, goos, goarch), err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 3 {
		t.Fatalf("%s: %s with %d packages", SBOMName(binary, goos, goarch), doc.SPDXVersion, len(doc.Packages))
	}
	versions := map[string]string{}
	for _, p := range doc.Packages {
		versions[p.Name] = p.VersionInfo
	}
	if root := doc.Packages[0]; root.Name != "github.com/maintenance-handler/maintenance-handler" || root.VersionInfo != testVersion {
		t.Errorf("%s describes %s %s", SBOMName(binary, goos, goarch), root.Name, root.VersionInfo)
	}
	if want := strings.TrimPrefix(runtime.Version(), "go"); versions["stdlib"] != want {
		t.Errorf("%s: stdlib %q, want %s", SBOMName(binary, goos, goarch), versions["stdlib"], want)
	}
	if want := required(t, dep); versions[dep] != want {
		t.Errorf("%s: %s %q, want %s as go.mod requires", SBOMName(binary, goos, goarch), dep, versions[dep], want)
	}
	if len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%s: %d relationships for %d packages", SBOMName(binary, goos, goarch), len(doc.Relationships), len(doc.Packages))
	}
}

// required is the version go.mod requires of module.
func required(t *testing.T, module string) string {
	t.Helper()
	b, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkArch checks that bin is an executable for platform (os/arch).
func checkArch(t *testing.T, platform string, bin []byte) {
	t.Helper()
	var got string
	if f, err := elf.NewFile(bytes.NewReader(bin)); err == nil {
		got = map[elf.Machine]string{elf.EM_X86_64: "linux/amd64", elf.EM_AARCH64: "linux/arm64"}[f.Machine]
	} else if f, err := macho.NewFile(bytes.NewReader(bin)); err == nil {
		got = map[macho.Cpu]string{macho.CpuAmd64: "darwin/amd64", macho.CpuArm64: "darwin/arm64"}[f.Cpu]
	}
	if got != platform {
		t.Errorf("the plugin for %s is an executable for %q", platform, got)
	}
}

// tarEntry is a file of an archive.
type tarEntry struct {
	Mode int64
	body []byte
}

// untar reads the gzipped tar file.
func untar(t *testing.T, file string) map[string]*tarEntry {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tarEntry{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = &tarEntry{Mode: h.Mode, body: b}
	}
}

// TestReleaseRefusesWhatItCannotStamp: a version that is not semver, an
// image with a tag, and a changelog with nothing to say stop the release
// before it builds anything, each with a message that says why.
func TestReleaseRefusesWhatItCannotStamp(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Release
		want string
	}{
		{"no v", Release{Version: "1.2.3", Image: "mh", Out: "x"}, "-version"},
		{"two parts", Release{Version: "v1.2", Image: "mh", Out: "x"}, "-version"},
		{"build metadata", Release{Version: "v1.2.3+abc", Image: "mh", Out: "x"}, "-version"},
		{"a tag on the image", Release{Version: "v1.2.3", Image: "mh:v1", Out: "x"}, "-image"},
		{"the checkout itself", Release{Version: "v1.2.3", Image: "mh", Out: "."}, "-o"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.r.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate: %v, want a word on %s", err, c.want)
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte("# Changelog\n\n## Unreleased\n\n## v1.0.0\n\n- first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Release{Root: dir, Version: "v1.1.0", Image: "mh", Out: filepath.Join(dir, "out")}
	if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing under ## Unreleased") {
		t.Errorf("a release with an empty Unreleased section: %v", err)
	}
	if _, err := os.Stat(r.Out); !os.IsNotExist(err) {
		t.Errorf("the refused release wrote %s (%v)", r.Out, err)
	}
	r.Version = "v1.0.0"
	entry, err := changelogEntry(filepath.Join(dir, "CHANGELOG.md"), r.Version)
	if err != nil || entry != "## v1.0.0\n\n- first\n" {
		t.Errorf("the entry of v1.0.0: %q %v", entry, err)
	}
}
