// Command image builds the project's container image without a container
// engine (make image): the image the Dockerfile describes, for linux/amd64
// and linux/arm64, as an OCI image layout that `crane push` sends to a
// registry as it is.
//
//	go run ./build/image -o bin/image -version v1.2.3
//
// The image holds what the Dockerfile's does: both static binaries in
// /usr/local/bin, built with the Dockerfile's flags, the project's LICENSE,
// the agent as the entrypoint, user 65532, and what they need of the
// distroless base, with each Debian package's copyright: CA
// certificates (Debian's ca-certificates, bundled as update-ca-certificates
// bundles them), time zone data (Debian's tzdata), and the root, nobody and
// nonroot users. The Debian packages are fetched by scripts/fetch-deb.sh.
// The same sources give the same digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/maintenance-handler/maintenance-handler/build/oci"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out := flag.String("o", "bin/image", "the OCI image layout to write (replaced)")
	version := flag.String("version", "dev", "the version the binaries report")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the platforms, comma-separated")
	flag.Parse()
	digest, err := build(ctx, ".", *out, *version, strings.Split(*platforms, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: %s (index %s)\n", *out, digest)
}

// Spec is what the image holds besides its base files; the Dockerfile says
// the same (a test compares them).
var Spec = struct {
	Binaries   []string // packages, built into BinDir
	BinDir     string
	License    string // where the project's LICENSE is
	LDFlags    string // with VERSION for the version
	User       string
	Entrypoint []string
	// Labels are the image's OCI labels, with VERSION for the version.
	Labels map[string]string
}{
	Binaries:   []string{"./cmd/agent", "./cmd/aggregator"},
	BinDir:     "/usr/local/bin/",
	License:    "/usr/share/doc/maintenance-handler/LICENSE",
	LDFlags:    "-s -w -X main.version=${VERSION}",
	User:       "65532:65532",
	Entrypoint: []string{"/usr/local/bin/agent"},
	Labels: map[string]string{
		"org.opencontainers.image.title":   "maintenance-handler",
		"org.opencontainers.image.source":  "https://github.com/maintenance-handler/maintenance-handler",
		"org.opencontainers.image.version": "${VERSION}",
	},
}

// labels are Spec.Labels for version.
func labels(version string) map[string]string {
	out := map[string]string{}
	for k, v := range Spec.Labels {
		out[k] = strings.ReplaceAll(v, "${VERSION}", version)
	}
	return out
}

// build writes the image for platforms (os/arch) of the module at root into
// the layout out and returns the index's digest.
func build(ctx context.Context, root, out, version string, platforms []string) (v1.Hash, error) {
	base, err := baseFiles(ctx, root)
	if err != nil {
		return v1.Hash{}, err
	}
	var images []v1.Image
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return v1.Hash{}, fmt.Errorf("platform %q: want os/arch", p)
		}
		bins, err := binaries(ctx, root, goos, goarch, version)
		if err != nil {
			return v1.Hash{}, err
		}
		img, err := oci.Build(oci.Image{
			Platform: v1.Platform{OS: goos, Architecture: goarch},
			Layers:   [][]oci.File{base, bins},
			Config: v1.Config{
				User:       Spec.User,
				Entrypoint: Spec.Entrypoint,
				WorkingDir: "/home/nonroot",
				Labels:     labels(version),
				Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
			},
		})
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image for %s: %w", p, err)
		}
		images = append(images, img)
	}
	if err := oci.WriteLayout(out, images...); err != nil {
		return v1.Hash{}, err
	}
	return indexDigest(out)
}

// binaries builds Spec.Binaries for goos/goarch as the Dockerfile does.
func binaries(ctx context.Context, root, goos, goarch, version string) ([]oci.File, error) {
	dir, err := os.MkdirTemp("", "mh-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	args := append([]string{"build", "-trimpath", "-ldflags", strings.ReplaceAll(Spec.LDFlags, "${VERSION}", version), "-o", dir + string(filepath.Separator)}, Spec.Binaries...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build for %s/%s: %w\n%s", goos, goarch, err, b)
	}
	var files []oci.File
	for _, pkg := range Spec.Binaries {
		name := filepath.Base(pkg)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		files = append(files, oci.File{Path: Spec.BinDir + name, Mode: 0o755, Body: b})
	}
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		return nil, err
	}
	return append(files, oci.File{Path: Spec.License, Mode: 0o644, Body: license}), nil
}

// baseFiles are what the binaries need of a distroless static base.
func baseFiles(ctx context.Context, root string) ([]oci.File, error) {
	certs, err := fetchDeb(ctx, root, "ca-certificates")
	if err != nil {
		return nil, err
	}
	tz, err := fetchDeb(ctx, root, "tzdata")
	if err != nil {
		return nil, err
	}
	bundle, err := caBundle(filepath.Join(certs, "usr/share/ca-certificates"))
	if err != nil {
		return nil, err
	}
	zoneinfo, err := oci.Tree(filepath.Join(tz, "usr/share/zoneinfo"), "/usr/share/zoneinfo")
	if err != nil {
		return nil, err
	}
	var copyrights []oci.File
	for pkg, dir := range map[string]string{"ca-certificates": certs, "tzdata": tz} {
		// Each Debian package's licence, as the distroless base carries it.
		b, err := os.ReadFile(filepath.Join(dir, "usr/share/doc", pkg, "copyright"))
		if err != nil {
			return nil, err
		}
		copyrights = append(copyrights, oci.File{Path: "/usr/share/doc/" + pkg + "/copyright", Mode: 0o644, Body: b})
	}
	sort.Slice(copyrights, func(i, j int) bool { return copyrights[i].Path < copyrights[j].Path })
	files := []oci.File{
		{Path: "/etc/passwd", Mode: 0o644, Body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Body: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Body: []byte("hosts: files dns\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Body: bundle},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}
	return append(append(files, copyrights...), zoneinfo...), nil
}

// caBundle concatenates the certificates under dir in the order
// update-ca-certificates does (sorted paths).
func caBundle(dir string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".crt") {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	if len(paths) < 50 {
		return nil, fmt.Errorf("found %d certificates under %s", len(paths), dir)
	}
	return out, nil
}

// fetchDeb unpacks a Debian package with the project's script and returns
// its folder.
func fetchDeb(ctx context.Context, root, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts/fetch-deb.sh"), pkg)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", pkg, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// indexDigest is the digest of the layout's index.
func indexDigest(dir string) (v1.Hash, error) {
	p, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	return p.Digest()
}
