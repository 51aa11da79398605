// Package flagdoc is the reference of the agent's and the aggregator's
// flags: the one place each setting's meaning is written (Doc; a setting
// both binaries take is one Doc, in shared.go). docs/flags.md is generated
// from it and the binaries' own flag sets (Reference; make docs), and a
// test in each binary's package fails when the page, the flags or the
// entries here disagree. A flag's help (--help) is its one-line summary.
package flagdoc

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Doc is one setting: one flag, or flags set together.
type Doc struct {
	// Names are the flags it describes, without their dashes.
	Names []string
	// Default is the default as the reference shows it where the flag's
	// own does not tell the whole story ("$NODE_NAME", "in-cluster");
	// empty: the flag's own.
	Default string
	// Text is its meaning, Markdown, links relative to docs/.
	Text string
	// Help is the flag's one line of --help where binaries share the
	// setting (shared.go), so that each says the same; empty: the flag's.
	Help string
}

// MaxHelp is the longest help a flag may have: one line of --help.
const MaxHelp = 80

// Reference is the Markdown table of the flags of fs in the order of docs,
// with the chart's value of each, or how the chart sets it (chart, by
// flag name). It fails, naming each, on a flag of fs no Doc names (but
// --help and --version), on a name no flag of fs has, on a flag whose
// help is longer than a line (MaxHelp), and on a flag chart neither names
// a value of nor marks as the chart's own, or both.
func Reference(fs *pflag.FlagSet, docs []Doc, chart map[string]Chart) (string, error) {
	var errs []string
	named := map[string]int{}
	var b strings.Builder
	b.WriteString("| flag | default | chart | meaning |\n|---|---|---|---|\n")
	for _, d := range docs {
		var flags, defaults []string
		for _, n := range d.Names {
			named[n]++
			f := fs.Lookup(n)
			if f == nil {
				errs = append(errs, fmt.Sprintf("--%s is documented but not a flag", n))
				continue
			}
			if d.Help != "" && f.Usage != d.Help {
				errs = append(errs, fmt.Sprintf("--%s's help is not its shared one, %q", n, d.Help))
			}
			flags = append(flags, "`--"+n+"`")
			defaults = append(defaults, defaultOf(f))
		}
		def := d.Default
		if def == "" {
			def = strings.Join(defaults, ", ")
		}
		cell, missing := chartCell(chart, d.Names)
		for _, n := range missing {
			errs = append(errs, fmt.Sprintf("--%s is neither a chart value nor set by the chart (one of Value and Itself in flagdoc's chart entries)", n))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(flags, ", "), def, cell, d.Text)
	}
	for n := range chart {
		if fs.Lookup(n) == nil {
			errs = append(errs, fmt.Sprintf("--%s has a chart entry but is not a flag", n))
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Usage == "":
			errs = append(errs, fmt.Sprintf("--%s has no help", f.Name))
		case len(f.Usage) > MaxHelp || strings.Contains(f.Usage, "\n"):
			errs = append(errs, fmt.Sprintf("--%s's help is %d characters: a line of at most %d, the detail here", f.Name, len(f.Usage), MaxHelp))
		}
		switch {
		case f.Name == "help" || f.Name == "version":
		case named[f.Name] == 0:
			errs = append(errs, fmt.Sprintf("--%s has no entry", f.Name))
		case named[f.Name] > 1:
			errs = append(errs, fmt.Sprintf("--%s has %d entries", f.Name, named[f.Name]))
		}
	})
	if len(errs) > 0 {
		slices.Sort(errs)
		return "", fmt.Errorf("the flags and their reference disagree: %s", strings.Join(errs, "; "))
	}
	return b.String(), nil
}

// defaultOf is f's default as the reference shows it.
func defaultOf(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "[]":
		return "none"
	}
	return "`" + f.DefValue + "`"
}

// Page is docs/flags.md, from the repository's root.
const Page = "docs/flags.md"

// WithSection is page with the section of binary (between its markers,
// "<!-- begin NAME -->" and "<!-- end NAME -->") holding table.
func WithSection(page, binary, table string) (string, error) {
	begin, end := "<!-- begin "+binary+" -->\n", "<!-- end "+binary+" -->"
	i, j := strings.Index(page, begin), strings.Index(page, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("%s has no section %q (%q to %q)", Page, binary, begin, end)
	}
	return page[:i+len(begin)] + table + page[j:], nil
}

// CheckPage says whether the section of binary in the flag reference under
// root (Page) is what Reference makes of fs, docs and chart (CheckSection).
func CheckPage(root, binary string, fs *pflag.FlagSet, docs []Doc, chart map[string]Chart, update bool) error {
	table, err := Reference(fs, docs, chart)
	if err != nil {
		return err
	}
	return CheckSection(root, binary, table, update)
}

// CheckSection says whether the section of binary in the flag reference
// under root (Page) holds table, and, with update, writes it so first.
// Each binary's test calls it (make docs updates).
func CheckSection(root, binary, table string, update bool) error {
	path := filepath.Join(root, Page)
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	want, err := WithSection(string(page), binary, table)
	switch {
	case err != nil:
		return err
	case update:
		return os.WriteFile(path, []byte(want), 0o644)
	case string(page) != want:
		return fmt.Errorf("%s is not the %s's flags as they are: run make docs", Page, binary)
	}
	return nil
}

// HelpTable is the Markdown table of the flags of fs whose meaning is
// their help (the kubectl plugin's: each command's help is its reference),
// sorted by name, but for those skip names.
func HelpTable(fs *pflag.FlagSet, skip ...string) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if slices.Contains(skip, f.Name) {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, defaultOf(f), strings.ReplaceAll(f.Usage, "|", "\\|"))
	})
	return b.String()
}
