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
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/mod/modfile"
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

// workflow is what the tests read of a GitHub Actions workflow.
type workflow struct {
	Permissions *map[string]string `json:"permissions"`
	Env         map[string]string  `json:"env"`
	Jobs        map[string]job     `json:"jobs"`
}

// job is a workflow's job.
type job struct {
	Permissions *map[string]string `json:"permissions"`
	Steps       []step             `json:"steps"`
}

// step is a job's step.
type step struct {
	Name             string            `json:"name"`
	Uses             string            `json:"uses"`
	Run              string            `json:"run"`
	WorkingDirectory string            `json:"working-directory"`
	With             map[string]string `json:"with"`
}

// readWorkflow reads .github/workflows/NAME.
func readWorkflow(t *testing.T, name string) (workflow, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", ".github", "workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return wf, b
}

// publication is where release.yml publishes each file of a release
// folder, by its path in the folder: "image", "chart", "notes" or
// "asset" (a file published twice has both, joined by +), and the
// patterns that named no file.
func publication(t *testing.T, wf workflow, dir string) (where map[string]string, unmatched []string) {
	t.Helper()
	where = map[string]string{}
	add := func(file, dest string) {
		if where[file] != "" {
			dest = where[file] + "+" + dest
		}
		where[file] = dest
	}
	for _, d := range []struct{ env, dest string }{{"CHART", "chart"}, {"NOTES", "notes"}, {"ASSETS", "asset"}} {
		for _, pattern := range strings.Fields(wf.Env[d.env]) {
			matches, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern)))
			if err != nil {
				t.Fatalf("%s: %q: %v", d.env, pattern, err)
			}
			if len(matches) == 0 {
				unmatched = append(unmatched, d.env+": "+pattern)
			}
			for _, m := range matches {
				rel, _ := filepath.Rel(dir, m)
				add(filepath.ToSlash(rel), d.dest)
			}
		}
	}
	layout := wf.Env["IMAGE_LAYOUT"]
	err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(layout)), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		add(filepath.ToSlash(rel), "image")
		return nil
	})
	if layout == "" || err != nil {
		unmatched = append(unmatched, "IMAGE_LAYOUT: "+layout)
	}
	return where, unmatched
}

// checkWorkflowPublishes checks release.yml against the release make
// release wrote into dir: the workflow runs make release into the folder
// it publishes from, every file of it is published once (an SBOM also
// attached to the image), every pattern names a file, the assets' names
// (a GitHub release is flat) are distinct and include every archive the
// krew manifest downloads, and each list is used by the publishing job.
func checkWorkflowPublishes(t *testing.T, dir string) {
	t.Helper()
	wf, _ := readWorkflow(t, "release.yml")
	build, publish := wf.Jobs["build"], wf.Jobs["publish"]
	var made, uploaded, downloaded bool
	for _, s := range build.Steps {
		made = made || strings.Contains(s.Run, `make release VERSION="$GITHUB_REF_NAME"`) && strings.Contains(s.Run, `RELEASE_DIR="$RELEASE_DIR"`)
		uploaded = uploaded || strings.HasPrefix(s.Uses, "actions/upload-artifact@") && s.With["path"] == "${{ env.RELEASE_DIR }}" && s.With["name"] == "release"
	}
	var scripts strings.Builder
	for _, s := range publish.Steps {
		downloaded = downloaded || strings.HasPrefix(s.Uses, "actions/download-artifact@") && s.With["path"] == "${{ env.RELEASE_DIR }}" && s.With["name"] == "release"
		if s.Run != "" && s.WorkingDirectory == "${{ env.RELEASE_DIR }}" {
			scripts.WriteString(s.Run)
		}
	}
	if !made || !uploaded || !downloaded {
		t.Errorf("release.yml: make release into $RELEASE_DIR %v, uploaded from it %v, downloaded into it by the publishing job %v", made, uploaded, downloaded)
	}
	for _, list := range []string{"IMAGE_LAYOUT", "CHART", "NOTES", "SBOMS", "ASSETS"} {
		if !strings.Contains(scripts.String(), "$"+list) {
			t.Errorf("release.yml: no step of the publishing job in $RELEASE_DIR uses $%s", list)
		}
	}

	where, unmatched := publication(t, wf, dir)
	if len(unmatched) > 0 {
		t.Errorf("release.yml publishes what make release did not write: %v", unmatched)
	}
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = where[filepath.ToSlash(rel)]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(where) {
		t.Errorf("release.yml publishes %d files, make release wrote %d", len(where), len(got))
	}
	for file, dest := range got {
		if dest == "" || strings.Contains(dest, "+") {
			t.Errorf("%s is published as %q: want once, as the image, the chart, the notes or an asset", file, dest)
		}
	}

	// The SBOMs are assets, and those of the image's binaries are attached
	// to its platform manifests.
	sboms, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(wf.Env["SBOMS"])))
	if err != nil || len(sboms) == 0 {
		t.Errorf("SBOMS %q names no file (%v)", wf.Env["SBOMS"], err)
	}
	for _, s := range sboms {
		if rel, _ := filepath.Rel(dir, s); got[filepath.ToSlash(rel)] != "asset" {
			t.Errorf("the SBOM %s is not an asset", rel)
		}
	}
	var index struct {
		Manifests []struct {
			Platform struct{ OS, Architecture string }
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, wf.Env["IMAGE_LAYOUT"], "index.json"))
	if err == nil {
		err = json.Unmarshal(b, &index)
	}
	if err != nil || len(index.Manifests) == 0 {
		t.Errorf("the image layout's index: %v", err)
	}
	for _, m := range index.Manifests {
		for _, binary := range []string{"agent", "aggregator"} {
			name := SBOMName(binary, m.Platform.OS, m.Platform.Architecture)
			if !strings.Contains(scripts.String(), binary) || got[name] != "asset" {
				t.Errorf("the image's %s for %s/%s: its SBOM %s is not attached", binary, m.Platform.OS, m.Platform.Architecture, name)
			}
		}
	}

	// A release's assets are flat: their names must not collide, and the
	// krew manifest downloads archives among them.
	names := map[string]string{}
	for file, dest := range got {
		if dest != "asset" {
			continue
		}
		if other, ok := names[path.Base(file)]; ok {
			t.Errorf("the assets %s and %s have one name", file, other)
		}
		names[path.Base(file)] = file
	}
	krew, err := os.ReadFile(filepath.Join(dir, "krew", "gce-maintenance.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	uris := regexp.MustCompile(`uri: \S+/releases/download/[^/\s]+/(\S+)`).FindAllStringSubmatch(string(krew), -1)
	if len(uris) == 0 {
		t.Error("the krew manifest downloads nothing from the release")
	}
	for _, u := range uris {
		if names[u[1]] == "" {
			t.Errorf("the krew manifest downloads %s, which is no asset of the release", u[1])
		}
	}
}

// releaseFiles is every file of a release folder, by its path there.
func releaseFiles(t *testing.T, dir string) map[string][]byte {
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
	return files
}

// sameRelease reports how two release folders differ: the files one has
// and the other not, and the files whose bytes differ.
func sameRelease(t *testing.T, a, b string) string {
	t.Helper()
	fa, fb := releaseFiles(t, a), releaseFiles(t, b)
	var diffs []string
	for name, body := range fa {
		other, ok := fb[name]
		switch {
		case !ok:
			diffs = append(diffs, "only in the first: "+name)
		case string(other) != string(body):
			diffs = append(diffs, "differs: "+name)
		}
	}
	for name := range fb {
		if _, ok := fa[name]; !ok {
			diffs = append(diffs, "only in the second: "+name)
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n")
}

// pinned is a step's action pinned by a full commit SHA, with the version
// it is as a comment: `uses: owner/repo@SHA # vX.Y.Z`.
var pinned = regexp.MustCompile(`^\s*(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$`)

// TestWorkflowsPinAndFence: every workflow grants nothing by default and
// each job only the permissions it names; every action is pinned by a
// full commit SHA (a tag can be moved), with its version said beside it.
func TestWorkflowsPinAndFence(t *testing.T) {
	names, err := filepath.Glob(filepath.Join("..", "..", ".github", "workflows", "*.yml"))
	if err != nil || len(names) < 2 {
		t.Fatalf("the workflows: %v %v", names, err)
	}
	for _, file := range names {
		wf, b := readWorkflow(t, filepath.Base(file))
		if wf.Permissions == nil || len(*wf.Permissions) != 0 {
			t.Errorf("%s: want permissions: {} at the top, so that a job has only what it names", file)
		}
		for name, job := range wf.Jobs {
			if job.Permissions == nil {
				t.Errorf("%s: job %s names no permissions", file, name)
			}
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "uses:") && !pinned.MatchString(line) {
				t.Errorf("%s:%d: %q: want uses: OWNER/REPO@FULL_SHA # vX.Y.Z", file, i+1, strings.TrimSpace(line))
			}
		}
	}
	// Every job builds with the toolchain go.mod names, the one make
	// release uses on a checkout: the same bytes.
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := modfile.Parse("go.mod", mod, nil); err != nil || f.Toolchain == nil {
		t.Errorf("go.mod names no toolchain (%v): a release would build with whichever Go the runner has", err)
	}
	for _, file := range names {
		wf, _ := readWorkflow(t, filepath.Base(file))
		for name, job := range wf.Jobs {
			for _, s := range job.Steps {
				if strings.HasPrefix(s.Uses, "actions/setup-go@") && s.With["go-version-file"] != "go.mod" {
					t.Errorf("%s: job %s sets up Go other than go.mod says: %v", file, name, s.With)
				}
			}
		}
	}

	// The publishing job alone writes, and no more than it publishes.
	wf, _ := readWorkflow(t, "release.yml")
	want := map[string]map[string]string{
		"build":   {"contents": "read"},
		"publish": {"contents": "write", "packages": "write", "id-token": "write", "attestations": "write"},
	}
	got := map[string]map[string]string{}
	for name, job := range wf.Jobs {
		if job.Permissions != nil {
			got[name] = *job.Permissions
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("release.yml's jobs' permissions (-want +got):\n%s", d)
	}
	ci, _ := readWorkflow(t, "ci.yml")
	if !slices.ContainsFunc(ci.Jobs["test"].Steps, func(s step) bool {
		return s.Run == "make test"
	}) {
		t.Error("ci.yml: no step runs make test")
	}
}
