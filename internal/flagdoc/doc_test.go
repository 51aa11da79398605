package flagdoc_test

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestReferenceNamesEveryFlagOnce: the reference is a row per entry, with
// the flag's own default where the entry gives none and the chart's value
// or the chart's own setting; a flag without an entry, an entry without a
// flag, a flag with two, no help, a help longer than a line, a flag the
// chart neither sets by a value nor itself (or both), and a chart entry
// without a flag each fail it, named.
func TestReferenceNamesEveryFlagOnce(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("a", "", "The a.")
	fs.Duration("b", 0, "The b.")
	fs.Int("c", 7, "The c.")
	chart := map[string]flagdoc.Chart{"a": {Itself: "from $A"}, "b": {Value: "x.b"}, "c": {Value: "x.c"}}
	table, err := flagdoc.Reference(fs, []flagdoc.Doc{{Names: []string{"a"}, Default: "`$A`", Text: "what a is"}, {Names: []string{"b", "c"}, Text: "b and c"}}, chart)
	if err != nil {
		t.Fatal(err)
	}
	if want := "| flag | default | chart | meaning |\n|---|---|---|---|\n| `--a` | `$A` | set by the chart: from $A | what a is |\n| `--b`, `--c` | `0s`, `7` | `x.b`, `x.c` | b and c |\n"; table != want {
		t.Errorf("Reference:\n%s\nwant:\n%s", table, want)
	}
	fs.String("long", "", strings.Repeat("x", flagdoc.MaxHelp+1))
	fs.String("mute", "", "")
	fs.String("unset", "", "The unset.")
	fs.String("both", "", "The both.")
	chart = map[string]flagdoc.Chart{"a": {Value: "x.a"}, "b": {Value: "x.b"}, "both": {Value: "x.both", Itself: "too"}, "ghost": {Value: "x.ghost"}}
	_, err = flagdoc.Reference(fs, []flagdoc.Doc{{Names: []string{"a"}}, {Names: []string{"a", "gone"}}, {Names: []string{"b"}}, {Names: []string{"unset", "both"}}}, chart)
	for _, want := range []string{"--a has 2 entries", "--c has no entry", "--gone is documented but not a flag", "--long has no entry", "--long's help is 81 characters", "--mute has no help",
		"--unset is neither a chart value nor set by the chart", "--both is neither a chart value nor set by the chart", "--ghost has a chart entry but is not a flag"} {
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
