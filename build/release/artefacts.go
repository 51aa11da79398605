package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ChartDir is the chart's folder, from the module's root.
const ChartDir = "charts/maintenance-handler"

// ldflags stamps version into a binary as make build does.
func ldflags(version string) string { return "-s -w -X main.version=" + version }

// image writes the image layout as make image does, and the SBOM of each
// binary in it, read back from the layout: what ships.
func (r Release) image(ctx context.Context) error {
	out := filepath.Join(r.Out, "image")
	cmd := exec.CommandContext(ctx, "go", "run", "./build/image", "-o", out, "-version", r.Version)
	cmd.Dir = r.Root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image: %w\n%s", err, b)
	}
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		files := mutate.Extract(img)
		tr := tar.NewReader(files)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				files.Close()
				return err
			}
			name := "/" + strings.TrimPrefix(path.Clean("/"+h.Name), "/")
			if path.Dir(name) != "/usr/local/bin" || h.Typeflag != tar.TypeReg {
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				files.Close()
				return err
			}
			if err := r.writeSBOM(path.Base(name), desc.Platform.OS, desc.Platform.Architecture, b); err != nil {
				files.Close()
				return err
			}
		}
		files.Close()
	}
	return nil
}

// goBuild builds pkg for goos/goarch with the release's flags and returns
// the binary.
func (r Release) goBuild(ctx context.Context, pkg, goos, goarch string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "mh-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, path.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags(r.Version), "-o", bin, pkg)
	cmd.Dir = r.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, goarch, err, b)
	}
	return os.ReadFile(bin)
}

// PluginArchive is the name of the plugin's archive for goos/goarch.
func PluginArchive(goos, goarch string) string {
	return fmt.Sprintf("kubectl-gce_maintenance_%s_%s.tar.gz", goos, goarch)
}

// completionScript is kubectl's hook for a plugin's shell completion
// (kubectl 1.26 and later run kubectl_complete-NAME, found on PATH, to
// complete `kubectl NAME`): it asks the plugin's own completion.
const completionScript = `#!/bin/sh
# Shell completion of kubectl gce-maintenance: kubectl runs this, found on PATH.
exec kubectl gce-maintenance __complete "$@"
`

// plugin writes the plugin's archive for each platform, the binary at its
// root as krew expects, with kubectl's completion hook beside it, and
// each binary's SBOM.
func (r Release) plugin(ctx context.Context) error {
	for _, p := range r.PluginPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		bin, err := r.goBuild(ctx, "./cmd/kubectl-gce_maintenance", goos, goarch)
		if err != nil {
			return err
		}
		if err := r.writeSBOM("kubectl-gce_maintenance", goos, goarch, bin); err != nil {
			return err
		}
		license, err := os.ReadFile(filepath.Join(r.Root, "LICENSE"))
		if err != nil {
			return err
		}
		archive, err := targz([]tarFile{{name: "kubectl-gce_maintenance", mode: 0o755, body: bin},
			{name: "kubectl_complete-gce_maintenance", mode: 0o755, body: []byte(completionScript)}, {name: "LICENSE", mode: 0o644, body: license}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.Out, PluginArchive(goos, goarch)), archive, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// krew renders .krew.yaml, the template krew-release-bot reads, with the
// release's version and each archive's address and checksum.
func (r Release) krew(context.Context) error {
	src, err := os.ReadFile(filepath.Join(r.Root, ".krew.yaml"))
	if err != nil {
		return err
	}
	tmpl, err := template.New(".krew.yaml").Option("missingkey=error").Funcs(template.FuncMap{
		// addURIAndSha is krew-release-bot's: the archive's address, in
		// which the tag is spelled {{ .TagName }}, and its sha256.
		"addURIAndSha": func(uri, tag string) (string, error) {
			uri = strings.ReplaceAll(uri, "{{ .TagName }}", tag)
			b, err := os.ReadFile(filepath.Join(r.Out, path.Base(uri)))
			if err != nil {
				return "", fmt.Errorf("the krew manifest names %s, which this release did not write", path.Base(uri))
			}
			sum := sha256.Sum256(b)
			return fmt.Sprintf("uri: %s\n      sha256: %s", uri, hex.EncodeToString(sum[:])), nil
		},
	}).Parse(string(src))
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, struct{ TagName string }{r.Version}); err != nil {
		return err
	}
	for _, p := range r.PluginPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		if !strings.Contains(out.String(), "/"+PluginArchive(goos, goarch)+"\n") {
			return fmt.Errorf(".krew.yaml has no platform %s", p)
		}
	}
	if err := os.MkdirAll(filepath.Join(r.Out, "krew"), 0o755); err != nil {
		return err
	}
	// The template's own comment is for krew-release-bot; the manifest
	// says what it is.
	body := out.String()
	for strings.HasPrefix(body, "#") {
		_, body, _ = strings.Cut(body, "\n")
	}
	head := fmt.Sprintf("# The krew manifest of kubectl-gce_maintenance %s (make release).\n", r.Version)
	return os.WriteFile(filepath.Join(r.Out, "krew", "gce-maintenance.yaml"), []byte(head+body), 0o644)
}

// ChartArchive is the name of the packaged chart of version.
func ChartArchive(chartVersion string) string {
	return "maintenance-handler-" + chartVersion + ".tgz"
}

// chart packages the chart as helm package --version --app-version does:
// every file of its folder but what .helmignore names, under the chart's
// name, with Chart.yaml's version and appVersion set; its default image is
// the release's (values.yaml's image.repository).
func (r Release) chart(context.Context) error {
	dir := filepath.Join(r.Root, ChartDir)
	ignore, err := helmignore(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return err
	}
	var files []tarFile
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() || ignore(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch rel {
		case "Chart.yaml":
			b, err = stampChart(b, r.ChartVersion(), r.Version)
		case "values.yaml":
			b, err = stampImage(b, r.Image)
		}
		if err != nil {
			return err
		}
		files = append(files, tarFile{name: "maintenance-handler/" + filepath.ToSlash(rel), mode: 0o644, body: b})
		return nil
	})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(files, func(f tarFile) bool { return f.name == "maintenance-handler/LICENSE" }) {
		license, err := os.ReadFile(filepath.Join(r.Root, "LICENSE"))
		if err != nil {
			return err
		}
		files = append(files, tarFile{name: "maintenance-handler/LICENSE", mode: 0o644, body: license})
	}
	archive, err := targz(files)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Out, ChartArchive(r.ChartVersion())), archive, 0o644)
}

// stampChart sets Chart.yaml's top-level version and appVersion.
func stampChart(chart []byte, version, appVersion string) ([]byte, error) {
	var out []string
	set := map[string]bool{}
	for _, line := range strings.Split(string(chart), "\n") {
		for key, value := range map[string]string{"version": version, "appVersion": appVersion} {
			if strings.HasPrefix(line, key+":") {
				line = key + ": " + value
				set[key] = true
			}
		}
		out = append(out, line)
	}
	if !set["version"] || !set["appVersion"] {
		return nil, errors.New("the chart's Chart.yaml has no top-level version or appVersion to stamp")
	}
	return []byte(strings.Join(out, "\n")), nil
}

// helmignore reads .helmignore's patterns (a name or a glob on a path's
// last element, as the chart's file uses them; # starts a comment) and
// says whether a path is ignored. Helm leaves .helmignore itself out too.
func helmignore(file string) (func(string) bool, error) {
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, "/!") {
			return nil, fmt.Errorf(".helmignore: %q: only names and globs on names are read here", line)
		}
		patterns = append(patterns, line)
	}
	return func(rel string) bool {
		base := filepath.Base(rel)
		if base == ".helmignore" {
			return true
		}
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, base); ok {
				return true
			}
		}
		return false
	}, nil
}

// AllInOne is the name of the rendered base.
const AllInOne = "maintenance-handler.yaml"

// allInOne renders the kustomize base with the release's image and a
// version label on every object.
func (r Release) allInOne(context.Context) error {
	fsys := filesys.MakeFsInMemory()
	base := filepath.Join(r.Root, "manifests", "base")
	entries, err := os.ReadDir(base)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			return fmt.Errorf("manifests/base/%s: the base has no folders to copy", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(base, e.Name()))
		if err != nil {
			return err
		}
		if err := fsys.WriteFile("/base/"+e.Name(), b); err != nil {
			return err
		}
	}
	overlay := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../base]
images:
  - name: maintenance-handler
    newName: %s
    newTag: %s
labels:
  - pairs: {app.kubernetes.io/version: %q}
`, r.Image, r.Version, r.Version)
	if err := fsys.WriteFile("/release/kustomization.yaml", []byte(overlay)); err != nil {
		return err
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/release")
	if err != nil {
		return err
	}
	y, err := res.AsYaml()
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# maintenance-handler %s: kubectl apply --server-side -f %s\n# The kustomize base (manifests/base) in one file, image %s:%s.\n", r.Version, AllInOne, r.Image, r.Version)
	return os.WriteFile(filepath.Join(r.Out, AllInOne), append([]byte(head), y...), 0o644)
}

// tarFile is one file of an archive.
type tarFile struct {
	name string
	mode int64
	body []byte
}

// targz writes files as a gzipped tar with fixed times and owners, so the
// same files give the same archive.
func targz(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
