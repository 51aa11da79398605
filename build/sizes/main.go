// Command sizes measures what each dependency costs in each binary (make
// bench): it builds the agent, the aggregator and the kubectl plugin for
// linux/amd64 as they ship (static, stripped) and once more with their
// symbols, adds up the code and data of each module's symbols, and prints a
// Markdown table. With -readme it also writes the table into that file,
// between the lines "<!-- sizes:begin -->" and "<!-- sizes:end -->".
//
//	go run ./build/sizes -readme docs/performance.md
//
// A module's figure is the size of its functions, read-only data, data and
// types (not its zeroed memory, which takes no room in the file), plus its
// share of what no symbol names: the runtime's table of every function
// (pclntab: names, line and stack maps) and function metadata, shared out
// in proportion to each module's code. The figures add up to the stripped
// binary's size; the shares are an estimate.
package main

import (
	"bytes"
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// binaries are what the project ships, in the table's column order, with
// the stripped size each is held to (MB).
var binaries = []struct {
	name, pkg string
	budget    float64
}{
	{"agent", "./cmd/agent", 20},
	{"aggregator", "./cmd/aggregator", 32},
	{"kubectl-gce_maintenance", "./cmd/kubectl-gce_maintenance", 32},
}

const (
	beginMarker = "<!-- sizes:begin -->"
	endMarker   = "<!-- sizes:end -->"
	// rows is how many modules the table names; the rest are summed.
	rows = 14
)

func main() {
	readme := flag.String("readme", "", "write the table into this file between the markers")
	flag.Parse()
	table, err := measure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizes:", err)
		os.Exit(1)
	}
	fmt.Print(table)
	if *readme != "" {
		if err := writeInto(*readme, table); err != nil {
			fmt.Fprintln(os.Stderr, "sizes:", err)
			os.Exit(1)
		}
	}
}

// binarySizes is one binary's stripped size and its bytes by module.
type binarySizes struct {
	stripped int64
	byModule map[string]int64
}

// symbolBytes is what a binary's symbols take, by module: in all, and in
// code alone.
type symbolBytes struct{ all, code map[string]int64 }

func measure() (string, error) {
	dir, err := os.MkdirTemp("", "sizes-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var all []binarySizes
	for _, b := range binaries {
		stripped := filepath.Join(dir, b.name)
		full := stripped + ".symbols"
		if err := build(stripped, b.pkg, "-s -w"); err != nil {
			return "", err
		}
		if err := build(full, b.pkg, ""); err != nil {
			return "", err
		}
		fi, err := os.Stat(stripped)
		if err != nil {
			return "", err
		}
		syms, err := moduleBytes(full)
		if err != nil {
			return "", err
		}
		all = append(all, binarySizes{stripped: fi.Size(), byModule: shareOut(fi.Size(), syms)})
	}
	return render(all), nil
}

func build(out, pkg, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}

// shareOut adds to each module's bytes its share, by its code, of the
// stripped binary's bytes that no module's symbol accounts for.
func shareOut(stripped int64, s symbolBytes) map[string]int64 {
	var named, code int64
	for m, n := range s.all {
		if m != "" {
			named += n
			code += s.code[m]
		}
	}
	out := map[string]int64{}
	for m, n := range s.all {
		if m != "" {
			out[m] = n + (stripped-named)*s.code[m]/code
		}
	}
	return out
}

// moduleBytes adds up the sizes of the binary's symbols that take room in
// the file, by the module of their package ("" for none: function
// metadata).
func moduleBytes(path string) (symbolBytes, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return symbolBytes{}, err
	}
	modules := []string{info.Main.Path}
	for _, d := range info.Deps {
		modules = append(modules, d.Path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return symbolBytes{}, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return symbolBytes{}, err
	}
	out := symbolBytes{all: map[string]int64{}, code: map[string]int64{}}
	for _, s := range syms {
		if int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) || f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue // undefined, absolute or zeroed memory
		}
		m := ""
		if !strings.HasPrefix(s.Name, "go:func.") {
			m = moduleOf(packageOf(s.Name), info.Main.Path, modules)
		}
		out.all[m] += int64(s.Size)
		if f.Sections[s.Section].Flags&elf.SHF_EXECINSTR != 0 {
			out.code[m] += int64(s.Size)
		}
	}
	return out, nil
}

// packageOf is the import path of the package a Go symbol belongs to:
// "k8s.io/api/core/v1" for "k8s.io/api/core/v1.(*Pod).Marshal",
// "type:*k8s.io/api/core/v1.Pod" and "go:itab.*k8s.io/api/core/v1.Pod,...".
func packageOf(sym string) string {
	for _, p := range []string{"type:", "go:itab.", "go:string.", "go:"} {
		sym = strings.TrimPrefix(sym, p)
	}
	sym = strings.TrimLeft(sym, "*[]")
	if i := strings.IndexAny(sym, "[(,"); i >= 0 {
		sym = sym[:i]
	}
	slash := max(strings.LastIndexByte(sym, '/'), 0)
	if dot := strings.IndexByte(sym[slash:], '.'); dot >= 0 {
		sym = sym[:slash+dot]
	}
	return sym
}

// moduleOf is the module that holds pkg (the longest module path that is
// a prefix of it), "Go standard library" for a package of the standard
// library, or "" for a symbol of no package.
func moduleOf(pkg, main string, modules []string) string {
	best := ""
	for _, m := range modules {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	switch {
	case best == main:
		return "maintenance-handler (this project)"
	case best != "":
		return best
	case pkg == "" || !strings.Contains(pkg, ".") || strings.HasPrefix(pkg, "vendor/"):
		return "Go standard library"
	}
	return ""
}

func render(all []binarySizes) string {
	type row struct {
		name  string
		sizes []int64
	}
	names := map[string]bool{}
	for _, b := range all {
		for m := range b.byModule {
			if m != "" {
				names[m] = true
			}
		}
	}
	var mods []row
	for m := range names {
		r := row{name: m}
		for _, b := range all {
			r.sizes = append(r.sizes, b.byModule[m])
		}
		mods = append(mods, r)
	}
	largest := func(r row) int64 { return slices.Max(r.sizes) }
	slices.SortFunc(mods, func(a, b row) int {
		return cmp.Or(cmp.Compare(largest(b), largest(a)), strings.Compare(a.name, b.name))
	})
	others := row{name: fmt.Sprintf("%d other modules", max(len(mods)-rows, 0)), sizes: make([]int64, len(all))}
	if len(mods) > rows {
		for _, r := range mods[rows:] {
			for i, s := range r.sizes {
				others.sizes[i] += s
			}
		}
		mods = append(mods[:rows], others)
	}

	var buf bytes.Buffer
	buf.WriteString("| MB (linux/amd64) |")
	for _, b := range binaries {
		fmt.Fprintf(&buf, " %s |", b.name)
	}
	buf.WriteString("\n|---|")
	for range binaries {
		buf.WriteString("---:|")
	}
	buf.WriteString("\n| **binary, stripped** |")
	for _, b := range all {
		fmt.Fprintf(&buf, " **%s** |", mb(b.stripped))
	}
	buf.WriteString("\n| budget |")
	for i, b := range all {
		verdict := "met"
		if float64(b.stripped)/1e6 > binaries[i].budget {
			verdict = "**over**"
		}
		fmt.Fprintf(&buf, " %.0f (%s) |", binaries[i].budget, verdict)
	}
	buf.WriteString("\n")
	for _, r := range mods {
		fmt.Fprintf(&buf, "| %s |", r.name)
		for _, s := range r.sizes {
			fmt.Fprintf(&buf, " %s |", mb(s))
		}
		buf.WriteString("\n")
	}
	return buf.String()
}

func mb(n int64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(n)/1e6)
}

// writeInto replaces what lies between the markers in path with table.
func writeInto(path, table string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(data)
	begin := strings.Index(text, beginMarker)
	end := strings.Index(text, endMarker)
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no %s ... %s section", path, beginMarker, endMarker)
	}
	text = text[:begin+len(beginMarker)] + "\n" + table + text[end:]
	return os.WriteFile(path, []byte(text), 0o644)
}
