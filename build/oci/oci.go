// Package oci writes container images without a container engine: layers
// from files listed in code, images for each platform, and an OCI image
// layout holding them under one index, which `crane push` (or `ctr images
// import` on a node) takes as it is.
//
// Every image is reproducible: the same files give the same digest (entries
// sorted, parent folders added, fixed owner, mode and time, gzip at a fixed
// level).
//
// What it does not do: pull a base image (there is no registry here; a base
// is files like any other), run anything in the image, or push.
//
// Concurrency: pure functions, and WriteLayout writes one folder.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the time on every file and in every config: a fixed time makes
// the digest depend on the content alone.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer.
type File struct {
	// Path is absolute, slash-separated.
	Path string
	// Mode is the permission bits (0o755 for a binary); Dir and Link make
	// it a folder or a symbolic link to Link.
	Mode int64
	Dir  bool
	Link string
	// UID and GID own it (0: root).
	UID, GID int
	Body     []byte
}

// Image is one platform's image.
type Image struct {
	Platform v1.Platform
	// Layers, the lowest first.
	Layers [][]File
	Config v1.Config
}

// Build returns img as a v1.Image with gzipped layers and an OCI manifest.
func Build(img Image) (v1.Image, error) {
	out := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	out = mutate.ConfigMediaType(out, types.OCIConfigJSON)
	for i, files := range img.Layers {
		data, err := tarOf(files)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
			tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if out, err = mutate.Append(out, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "maintenance-handler build/oci"}}); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = img.Platform.Architecture, img.Platform.OS, img.Platform.Variant
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = img.Config
	return mutate.ConfigFile(out, cf)
}

// WriteLayout writes images into a new OCI image layout at dir (whatever
// was there is replaced), each under its platform in one index.
func WriteLayout(dir string, images ...v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	var idx v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: cf.Platform()}})
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	return nil
}

// tarOf is the layer's tar: every entry's parent folders added (root-owned,
// 0755, unless listed), entries sorted by path.
func tarOf(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("%s is listed twice", p)
		}
		f.Path = p
		byPath[p] = f
	}
	for _, f := range files {
		for dir := path.Dir(path.Clean("/" + f.Path)); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = File{Path: dir, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: Epoch, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Tree lists the files under root on disk as layer entries under prefix
// (root's own path replaced by prefix), symbolic links kept as links, owned
// by root.
func Tree(root, prefix string) ([]File, error) {
	var out []File
	err := walk(root, func(p string, fi os.FileInfo) error {
		rel := strings.TrimPrefix(p, root)
		f := File{Path: path.Join(prefix, rel), Mode: int64(fi.Mode().Perm())}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			f.Link, f.Mode = target, 0o777
		case fi.IsDir():
			f.Dir = true
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f.Body = b
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// walk calls fn for root and everything under it, without following links.
func walk(root string, fn func(string, os.FileInfo) error) error {
	fi, err := os.Lstat(root)
	if err != nil {
		return err
	}
	if err := fn(root, fi); err != nil {
		return err
	}
	if !fi.IsDir() {
		return nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := walk(path.Join(root, e.Name()), fn); err != nil {
			return err
		}
	}
	return nil
}
