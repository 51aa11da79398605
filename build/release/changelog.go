package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/mod/semver"
)

// changelogEntry is the entry of version in the changelog, headed with
// the version: its own section; for a prerelease (vX.Y.Z-rc.1) without
// one, the section of the version it leads to (vX.Y.Z); else what is
// under Unreleased. A section's heading is a second-level one that names
// the version as Keep a Changelog writes it, `## [0.1.0] - 2026-12-08`, or
// bare, `## v0.1.0`. An entry with nothing in it is an error.
func changelogEntry(file, version string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	sections := changelogSections(b)
	text, ok := sections[version]
	if !ok && semver.Prerelease(version) != "" {
		text, ok = sections[strings.TrimSuffix(version, semver.Prerelease(version))]
	}
	if !ok {
		text = sections["Unreleased"]
	}
	if text == "" {
		return "", fmt.Errorf("CHANGELOG.md has no entry for %s and nothing under ## Unreleased: say what changed first", version)
	}
	return fmt.Sprintf("## %s\n\n%s\n", version, text), nil
}

// changelogSections is the body of each second-level section of a
// changelog, by the version its heading names (vX.Y.Z), or Unreleased.
func changelogSections(changelog []byte) map[string]string {
	sections := map[string]string{}
	var current string
	var body []string
	flush := func() {
		if current != "" {
			sections[current] = strings.TrimSpace(strings.Join(body, "\n"))
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			flush()
			current, body = sectionName(h), nil
			continue
		}
		body = append(body, line)
	}
	flush()
	return sections
}

// sectionName is the name a section's heading gives: its first word
// without the brackets of a link, a version with its v, Unreleased in any
// case.
func sectionName(heading string) string {
	name := strings.Trim(strings.Fields(heading + " ")[0], "[]")
	switch {
	case strings.EqualFold(name, "Unreleased"):
		return "Unreleased"
	case semver.IsValid("v" + name):
		return "v" + name
	}
	return name
}
