package testworld

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/maintenance-handler/maintenance-handler/build/oci"
)

// ProgramImage builds the main package pkg of the project (a path such as
// "./test/cmd/pause") as a static binary for this machine and returns an
// image with it as /NAME and its entrypoint, NAME being the package's last
// element.
func ProgramImage(ctx context.Context, pkg string) (v1.Image, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "mh-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	name := filepath.Base(pkg)
	out := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	return oci.Build(oci.Image{
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Layers:   [][]oci.File{{{Path: "/" + name, Mode: 0o755, Body: body}}},
		Config:   v1.Config{Entrypoint: []string{"/" + name}},
	})
}

// ImportImage loads img into the node's containerd as ref, where the
// kubelet finds it (a pod naming ref with imagePullPolicy IfNotPresent or
// Never runs it; nothing is pulled).
func (n *RealNode) ImportImage(ctx context.Context, ref string, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Join(n.Root, "images"), "layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := oci.WriteLayout(dir, img); err != nil {
		return err
	}
	return n.ImportLayout(ctx, ref, dir)
}

// ImportLayout loads the OCI image layout dir (an index of one or more
// platforms, as make image writes) into the node's containerd as ref, and
// unpacks this machine's platform.
func (n *RealNode) ImportLayout(ctx context.Context, ref, dir string) error {
	archive := dir + ".tar"
	if err := tarDir(dir, archive); err != nil {
		return err
	}
	defer os.Remove(archive)
	_, err := n.ctr(ctx, "images", "import", "--index-name", ref, "--platform", "linux/"+runtime.GOARCH, archive)
	return err
}

// importPause builds the sandbox image and imports it under the name the
// node's containerd pins.
func (n *RealNode) importPause(ctx context.Context) error {
	img, err := ProgramImage(ctx, "./test/cmd/pause")
	if err != nil {
		return err
	}
	return n.ImportImage(ctx, PauseImage, img)
}

// tarDir writes the files under dir into a tar archive at path, with
// paths relative to dir.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// ShellImage is a shell and the usual commands (Debian's busybox-static),
// for containers that run a script such as examples/checkpoint/loop.sh.
const ShellImage = "registry.test/mh/shell:1"

// shellCommands are linked to busybox in ShellImage's /bin.
var shellCommands = []string{"sh", "sleep", "date", "echo", "cat", "test", "["}

// ImportShell builds ShellImage from Debian's busybox-static (fetched by
// scripts/fetch-deb.sh) and imports it into the node.
func (n *RealNode) ImportShell(ctx context.Context) error {
	dir, err := FetchDeb(ctx, "busybox-static")
	if err != nil {
		return err
	}
	busybox, err := os.ReadFile(filepath.Join(dir, "bin", "busybox"))
	if err != nil {
		return err
	}
	files := []oci.File{{Path: "/bin/busybox", Mode: 0o755, Body: busybox}, {Path: "/tmp", Dir: true, Mode: 0o1777}}
	for _, c := range shellCommands {
		files = append(files, oci.File{Path: "/bin/" + c, Link: "busybox"})
	}
	img, err := oci.Build(oci.Image{
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Layers:   [][]oci.File{files},
		Config:   v1.Config{Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}},
	})
	if err != nil {
		return err
	}
	return n.ImportImage(ctx, ShellImage, img)
}
