// Package image_test checks the container image's binaries: CI has no
// container engine, so it builds the same static binaries the Dockerfile
// builds, with the same flags, and runs them.
package image_test

import (
	"compress/gzip"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestStaticBinariesWithTheDockerfilesFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/agent ./cmd/aggregator
	m := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 GOOS=\$\{TARGETOS\} GOARCH=\$\{TARGETARCH\} go build -trimpath -ldflags "([^"]*)" -o /out/ (.*)$`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("the Dockerfile's build line is not the one this test mirrors")
	}
	if !regexp.MustCompile(`(?m)^FROM --platform=\$BUILDPLATFORM golang:\S+ AS build$`).Match(dockerfile) {
		t.Error("the Dockerfile's build stage does not run on the builder's platform (cross-compiling for each target)")
	}
	ldflags := strings.ReplaceAll(string(m[1]), "${VERSION}", "v9.9.9-test")
	pkgs := strings.Fields(string(m[2]))
	if strings.Join(pkgs, " ") != "./cmd/agent ./cmd/aggregator" {
		t.Errorf("the image builds %v, want both binaries", pkgs)
	}
	// The platforms the README's buildx line builds.
	for _, arch := range []struct {
		goarch  string
		machine elf.Machine
	}{{"amd64", elf.EM_X86_64}, {"arm64", elf.EM_AARCH64}} {
		out := t.TempDir()
		args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", out + string(filepath.Separator)}, pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch.goarch)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build for %s: %v\n%s", arch.goarch, err, b)
		}
		var layer int64 // the image's own layer: both binaries, gzipped as a registry stores it
		for _, name := range []string{"agent", "aggregator"} {
			bin := filepath.Join(out, name)
			layer += gzippedSize(t, bin)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != arch.machine {
				t.Errorf("%s for %s is built for %v", name, arch.goarch, f.Machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s for %s is dynamically linked", name, arch.goarch)
				}
			}
			f.Close()
			if fi, err := os.Stat(bin); err == nil {
				// Every accelerator node pulls the agent at boot: its size
				// is a figure worth watching.
				t.Logf("%s for %s: %.1f MB stripped", name, arch.goarch, float64(fi.Size())/1e6)
			}
			if arch.goarch != runtime.GOARCH {
				continue // cannot run here
			}
			v, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil || strings.TrimSpace(string(v)) != "maintenance-handler "+name+" v9.9.9-test" {
				t.Errorf("%s --version: %q %v", name, v, err)
			}
			checkFlagsDocumented(t, bin, name)
		}
		// The image is distroless/static (about 2 MB compressed) plus
		// this layer: what a node pulls.
		t.Logf("image for %s: binaries layer %.1f MB compressed, on distroless/static", arch.goarch, float64(layer)/1e6)
	}
}

// gzippedSize is the size of path compressed with gzip's default level.
func gzippedSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n countingWriter
	zw := gzip.NewWriter(&n)
	if _, err := io.Copy(zw, f); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// checkFlagsDocumented checks that every flag the binary's --help lists is
// in the README's configuration reference.
func checkFlagsDocumented(t *testing.T, bin, name string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput() // pflag's --help exits 0 or 2 depending on the caller
	flags := regexp.MustCompile(`(?m)^\s+(--[a-z][a-z-]*)\b`).FindAllStringSubmatch(string(help), -1)
	if len(flags) < 5 {
		t.Fatalf("%s --help lists %d flags:\n%s", name, len(flags), help)
	}
	for _, f := range flags {
		if !strings.Contains(string(readme), "`"+f[1]+"`") {
			t.Errorf("%s's flag %s is not in the README", name, f[1])
		}
	}
}
