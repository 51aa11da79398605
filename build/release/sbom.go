package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SBOM is the part of an SPDX 2.3 document the release writes: the
// binary, the Go toolchain and every module linked into it.
type SBOM struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says when and by what the document was made.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is a module (or the toolchain), named by its package URL.
type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	ExternalRefs     []ExternalRef `json:"externalRefs,omitempty"`
}

// ExternalRef is a package URL.
type ExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

// Relationship links two elements.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOMName is the name of the SBOM of binary for goos/goarch.
func SBOMName(binary, goos, goarch string) string {
	return fmt.Sprintf("sbom/%s_%s_%s.spdx.json", binary, goos, goarch)
}

// writeSBOM writes the SBOM of the Go binary bin, read from its build
// information: the main module as the release's version, then the
// toolchain and each dependency as linked (a replacement in its place).
func (r Release) writeSBOM(binary, goos, goarch string, bin []byte) error {
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%s for %s/%s: %w", binary, goos, goarch, err)
	}
	created, err := r.sourceTime()
	if err != nil {
		return err
	}
	doc := SBOM{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              fmt.Sprintf("%s %s %s/%s", binary, r.Version, goos, goarch),
		DocumentNamespace: fmt.Sprintf("https://github.com/maintenance-handler/maintenance-handler/releases/%s/%s", r.Version, SBOMName(binary, goos, goarch)),
		CreationInfo:      CreationInfo{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: maintenance-handler-release-" + r.Version}},
	}
	add := func(name, version string) string {
		id := fmt.Sprintf("SPDXRef-Package-%d", len(doc.Packages))
		p := Package{Name: name, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION"}
		purl := "pkg:golang/" + name + "@" + version
		if name == "stdlib" {
			purl = "pkg:golang/stdlib@" + version
		}
		p.ExternalRefs = []ExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl}}
		doc.Packages = append(doc.Packages, p)
		return id
	}
	root := add(info.Main.Path, r.Version)
	doc.Relationships = append(doc.Relationships, Relationship{"SPDXRef-DOCUMENT", "DESCRIBES", root})
	doc.Relationships = append(doc.Relationships, Relationship{root, "DEPENDS_ON", add("stdlib", strings.TrimPrefix(info.GoVersion, "go"))})
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		doc.Relationships = append(doc.Relationships, Relationship{root, "DEPENDS_ON", add(d.Path, d.Version)})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Out, SBOMName(binary, goos, goarch)), append(b, '\n'), 0o644)
}

// sourceTime is when the sources were made, the time an SBOM says it was
// made, so that the same sources give the same document:
// SOURCE_DATE_EPOCH when set (the reproducible-builds convention), else
// the time of the checkout's last commit.
func (r Release) sourceTime() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		cmd := exec.Command("git", "log", "-1", "--format=%ct")
		cmd.Dir = r.Root
		out, err := cmd.Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("the sources' time: not a git checkout (%v); set SOURCE_DATE_EPOCH", err)
		}
		epoch = strings.TrimSpace(string(out))
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the sources' time %q: %w", epoch, err)
	}
	return time.Unix(sec, 0), nil
}
