package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChangelogEntry: the entry make release puts into a release, from
// Keep a Changelog's headings as from bare ones; a release candidate
// takes its version's entry; a version without one, Unreleased's.
func TestChangelogEntry(t *testing.T) {
	const changelog = `# Changelog

Intro text, in no entry.

## [Unreleased]

- next

## [0.2.0] - 2027-01-10

Upgrading: may be skipped.

### Added

- two

## v0.1.0

- one

## Before 0.1.0

history
`
	dir := t.TempDir()
	file := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(file, []byte(changelog), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ version, want string }{
		{"v0.2.0", "## v0.2.0\n\nUpgrading: may be skipped.\n\n### Added\n\n- two\n"},
		{"v0.2.0-rc.1", "## v0.2.0-rc.1\n\nUpgrading: may be skipped.\n\n### Added\n\n- two\n"},
		{"v0.1.0", "## v0.1.0\n\n- one\n"},
		{"v0.3.0", "## v0.3.0\n\n- next\n"},
		{"v0.3.0-rc.1", "## v0.3.0-rc.1\n\n- next\n"},
	} {
		got, err := changelogEntry(file, c.version)
		if err != nil {
			t.Errorf("%s: %v", c.version, err)
			continue
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("the entry of %s (-want +got):\n%s", c.version, d)
		}
	}
}

// TestChangelogFirstRelease: the project's CHANGELOG.md has the first
// release's entry as users read one: the upgrade first, then what was
// added, changed, fixed and secured.
func TestChangelogFirstRelease(t *testing.T) {
	entry, err := changelogEntry(filepath.Join("..", "..", "CHANGELOG.md"), "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(entry, "## v0.1.0\n\nUpgrading: ") {
		t.Errorf("v0.1.0's entry does not start by saying how to upgrade: %.80q", entry)
	}
	at := -1
	for _, section := range []string{"### Added", "### Changed", "### Fixed", "### Security"} {
		i := strings.Index(entry, "\n"+section+"\n")
		if i < at {
			t.Errorf("v0.1.0's entry has no %s after the sections before it", section)
		}
		at = i
	}
}
