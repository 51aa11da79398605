package main

import (
	"archive/tar"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/maintenance-handler/maintenance-handler/test/testworld"
)

// TestImageIsTheDockerfilesAndReproducible: make image writes, without a
// container engine, the image the Dockerfile describes (its binaries, build
// flags, binary folder, user and entrypoint, and what the distroless base
// gives them: CA certificates, time zone data, the nonroot user), for both
// platforms (static binaries of the right architecture), and the same
// digest twice. The host's binaries from the image print the stamped
// version, and every flag they take is in the README or docs/
func TestImageIsTheDockerfilesAndReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image twice")
	}
	checkDockerfile(t)
	testworld.TakeTurns(t, "cross-build")
	// As make image runs it (a process of its own: built without the race
	// detector, as a user builds it).
	makeImage := func() (string, v1.Hash) {
		out := filepath.Join(t.TempDir(), "image")
		cmd := exec.Command("go", "run", "./build/image", "-o", out, "-version", "v9.9.9-test")
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image: %v\n%s", err, b)
		}
		d, err := indexDigest(out)
		if err != nil {
			t.Fatal(err)
		}
		return out, d
	}
	first, d1 := makeImage()
	_, d2 := makeImage()
	if d1 != d2 {
		t.Errorf("two builds of the same sources: index %s and %s, want one digest", d1, d2)
	}
	t.Logf("image index %s", d1)

	idx, err := layout.ImageIndexFromPath(first)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(m.Manifests) != len(machines) {
		t.Fatalf("the index lists %d images, want one per platform", len(m.Manifests))
	}
	for _, desc := range m.Manifests {
		arch := desc.Platform.Architecture
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch || cf.Config.User != Spec.User || strings.Join(cf.Config.Entrypoint, " ") != strings.Join(Spec.Entrypoint, " ") {
			t.Errorf("%s: config os %s arch %s user %q entrypoint %q", arch, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
		}
		if v := cf.Config.Labels["org.opencontainers.image.version"]; v != "v9.9.9-test" {
			t.Errorf("%s: the image is labelled version %q, want v9.9.9-test", arch, v)
		}
		files := contents(t, img)
		for _, pkg := range Spec.Binaries {
			name := filepath.Base(pkg)
			bin := files[Spec.BinDir+name]
			if bin == nil || bin.mode&0o111 == 0 {
				t.Fatalf("%s: %s%s missing or not executable", arch, Spec.BinDir, name)
			}
			checkStatic(t, arch, name, bin.body, machines[arch])
		}
		license, err := os.ReadFile("../../LICENSE")
		if err != nil {
			t.Fatal(err)
		}
		if l := files[Spec.License]; l == nil || string(l.body) != string(license) {
			t.Errorf("%s: the image has no %s, the project's licence", arch, Spec.License)
		}
		for _, pkg := range []string{"ca-certificates", "tzdata"} {
			if files["/usr/share/doc/"+pkg+"/copyright"] == nil {
				t.Errorf("%s: the image has no copyright of the Debian package %s it carries", arch, pkg)
			}
		}
		if p := files["/etc/passwd"]; p == nil || !strings.Contains(string(p.body), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no nonroot user 65532", arch)
		}
		if h := files["/home/nonroot"]; h == nil || h.uid != 65532 {
			t.Errorf("%s: /home/nonroot missing or not owned by 65532", arch)
		}
		if tmp := files["/tmp"]; tmp == nil || tmp.mode != 0o1777 {
			t.Errorf("%s: /tmp missing or not 1777", arch)
		}
		certs := 0
		for rest := files["/etc/ssl/certs/ca-certificates.crt"].bodyOrNil(); ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if _, err := x509.ParseCertificate(b.Bytes); err == nil {
				certs++
			}
		}
		if certs < 100 {
			t.Errorf("%s: the CA bundle holds %d certificates", arch, certs)
		}
		tz := files["/usr/share/zoneinfo/Europe/Berlin"]
		if _, err := time.LoadLocationFromTZData("Europe/Berlin", tz.bodyOrNil()); err != nil {
			t.Errorf("%s: no time zone data for Europe/Berlin: %v", arch, err)
		}
		if arch == runtime.GOARCH {
			// The binaries from the image run here, say their version, and
			// every flag they take is in the README or docs/
			for _, pkg := range Spec.Binaries {
				name := filepath.Base(pkg)
				path := filepath.Join(t.TempDir(), name)
				if err := os.WriteFile(path, files[Spec.BinDir+name].body, 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(path, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "maintenance-handler "+name+" v9.9.9-test" {
					t.Errorf("the image's %s --version: %q %v", name, out, err)
				}
				checkFlagsDocumented(t, path, name)
			}
		}
		size := int64(0)
		layers, _ := img.Layers()
		for _, l := range layers {
			s, _ := l.Size()
			size += s
		}
		t.Logf("image for %s: %d layers, %.1f MB compressed", arch, len(layers), float64(size)/1e6)
	}
}

// checkDockerfile: the Dockerfile says what Spec says.
func checkDockerfile(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	m := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 GOOS=\$\{TARGETOS\} GOARCH=\$\{TARGETARCH\} go build -trimpath -ldflags "([^"]*)" -o /out/ (.*)$`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal("the Dockerfile's build line is not the one this test reads")
	}
	if m[1] != Spec.LDFlags || m[2] != strings.Join(Spec.Binaries, " ") {
		t.Errorf("the Dockerfile builds %s with %q; make image builds %v with %q", m[2], m[1], Spec.Binaries, Spec.LDFlags)
	}
	want := []string{
		"FROM gcr.io/distroless/static-debian12:nonroot", // CA certificates, tzdata, users root, nobody, nonroot
		"COPY --from=build /out/ " + Spec.BinDir,
		"COPY LICENSE " + Spec.License,
		"USER " + Spec.User,
	}
	for _, line := range want {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(df) {
			t.Errorf("the Dockerfile has no line %q, which make image builds", line)
		}
	}
	for k, v := range Spec.Labels {
		if !regexp.MustCompile(`(?m)^(LABEL |\s+)` + regexp.QuoteMeta(k+`="`+v+`"`) + `( \\)?$`).MatchString(df) {
			t.Errorf("the Dockerfile does not label the image %s=%q, as make image does", k, v)
		}
	}
	e := regexp.MustCompile(`(?m)^ENTRYPOINT (.*)$`).FindStringSubmatch(df)
	var entrypoint []string
	if e == nil || json.Unmarshal([]byte(e[1]), &entrypoint) != nil || strings.Join(entrypoint, " ") != strings.Join(Spec.Entrypoint, " ") {
		t.Errorf("the Dockerfile's ENTRYPOINT is not %q", Spec.Entrypoint)
	}
}

func checkStatic(t *testing.T, arch, name string, body []byte, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("%s %s: %v", arch, name, err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s %s is built for %v", arch, name, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s %s is dynamically linked", arch, name)
		}
	}
}

type entry struct {
	mode     int64
	uid      int
	body     []byte
	linkname string
}

func (e *entry) bodyOrNil() []byte {
	if e == nil {
		return nil
	}
	return e.body
}

// contents is the image's file system, the upper layers over the lower.
func contents(t *testing.T, img v1.Image) map[string]*entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*entry{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(h.Name, "/")] = &entry{mode: h.Mode, uid: h.Uid, body: body, linkname: h.Linkname}
		}
		rc.Close()
	}
	return out
}

// checkFlagsDocumented checks that every flag the binary's --help lists is
// in the README or docs/
func checkFlagsDocumented(t *testing.T, bin, name string) {
	t.Helper()
	var readme []byte
	pages, _ := filepath.Glob("../../docs/*.md")
	for _, f := range append([]string{"../../README.md"}, pages...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(readme, b...)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput() // pflag's --help exits 0 or 2 depending on the caller
	flags := regexp.MustCompile(`(?m)^\s+(--[a-z][a-z-]*)\b`).FindAllStringSubmatch(string(help), -1)
	if len(flags) < 5 {
		t.Fatalf("%s --help lists %d flags:\n%s", name, len(flags), help)
	}
	for _, f := range flags {
		if !strings.Contains(string(readme), "`"+f[1]+"`") {
			t.Errorf("%s's flag %s is not in the README or docs/", name, f[1])
		}
	}
}
