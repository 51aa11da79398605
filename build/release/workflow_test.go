package main

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/modfile"
	"sigs.k8s.io/yaml"
)

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
