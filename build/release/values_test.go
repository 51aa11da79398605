package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStampImage: the released chart's values.yaml names the release's
// image, every other line kept; a values.yaml whose image.repository is
// not where it is looked for stops the release instead of shipping a chart
// that installs another image.
func TestStampImage(t *testing.T) {
	const values = "# a comment\nimage:\n  # -- the repository\n  repository: maintenance-handler\n  tag: \"\"\n\nother:\n  repository: untouched\n"
	got, err := stampImage([]byte(values), "ghcr.io/o/maintenance-handler")
	want := "# a comment\nimage:\n  # -- the repository\n  repository: ghcr.io/o/maintenance-handler\n  tag: \"\"\n\nother:\n  repository: untouched\n"
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, string(got)); d != "" {
		t.Errorf("stamped values.yaml (-want +got):\n%s", d)
	}
	for name, bad := range map[string]string{
		"no image":          "other:\n  repository: x\n",
		"a flow mapping":    "image: {repository: x}\n",
		"nested deeper":     "image:\n  registry:\n    repository: x\n",
		"two repositories":  "image:\n  repository: x\n  repository: y\n",
		"repository at top": "repository: x\nimage:\n  tag: v1\n",
	} {
		if _, err := stampImage([]byte(bad), "r"); err == nil {
			t.Errorf("%s: stamped %q", name, bad)
		}
	}
}
