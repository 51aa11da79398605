package flagdoc_test

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestReferenceNamesEveryFlagOnce: the reference is a row per entry, with
// the flag's own default where the entry gives none; a flag without an
// entry, an entry without a flag, a flag with two, no help and a help
// longer than a line each fail it, named.
func TestReferenceNamesEveryFlagOnce(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("a", "", "The a.")
	fs.Duration("b", 0, "The b.")
	fs.Int("c", 7, "The c.")
	table, err := flagdoc.Reference(fs, []flagdoc.Doc{{Names: []string{"a"}, Default: "`$A`", Text: "what a is"}, {Names: []string{"b", "c"}, Text: "b and c"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "| flag | default | meaning |\n|---|---|---|\n| `--a` | `$A` | what a is |\n| `--b`, `--c` | `0s`, `7` | b and c |\n"; table != want {
		t.Errorf("Reference:\n%s\nwant:\n%s", table, want)
	}
	fs.String("long", "", strings.Repeat("x", flagdoc.MaxHelp+1))
	fs.String("mute", "", "")
	_, err = flagdoc.Reference(fs, []flagdoc.Doc{{Names: []string{"a"}}, {Names: []string{"a", "gone"}}, {Names: []string{"b"}}})
	for _, want := range []string{"--a has 2 entries", "--c has no entry", "--gone is documented but not a flag", "--long has no entry", "--long's help is 81 characters", "--mute has no help"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Reference of a mismatch: %v, want it to say %q", err, want)
		}
	}
}

// TestWithSection: a binary's section is replaced between its markers, the
// rest of the page kept; a page without them is an error.
func TestWithSection(t *testing.T) {
	page := "# F\n<!-- begin agent -->\nold\n<!-- end agent -->\ntail\n"
	got, err := flagdoc.WithSection(page, "agent", "new\n")
	if err != nil || got != "# F\n<!-- begin agent -->\nnew\n<!-- end agent -->\ntail\n" {
		t.Errorf("WithSection: %q, %v", got, err)
	}
	if _, err := flagdoc.WithSection(page, "aggregator", "x"); err == nil {
		t.Error("WithSection of a section the page lacks: no error")
	}
}
