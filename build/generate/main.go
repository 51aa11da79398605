// Command generate writes every generated file of the repository from its
// one source (package internal/generate): run it from the repository's
// root, as make generate does, after changing monitoring/rules.yaml, the
// Grafana dashboard, or the chart (its values.yaml or its templates, which
// the kustomize base is rendered from with -helm, the pinned helm binary).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"

	"github.com/maintenance-handler/maintenance-handler/internal/generate"
)

func main() {
	helm := flag.String("helm", "", "the helm binary that renders the chart into the kustomize base (make generate passes the pinned one); empty: the base is left as it is")
	flag.Parse()
	if err := run(*helm); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(helm string) error {
	files, err := generate.Files(".")
	if err != nil {
		return err
	}
	if helm != "" {
		var stderr bytes.Buffer
		cmd := exec.Command(helm, generate.BaseRender...)
		cmd.Stderr = &stderr
		render, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("render the chart: %v: %s", err, stderr.String())
		}
		base, err := generate.Base(render)
		if err != nil {
			return err
		}
		files = append(files, base...)
	}
	for _, f := range files {
		if have, err := os.ReadFile(f.Path); err == nil && bytes.Equal(have, f.Data) {
			continue
		}
		if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
			return err
		}
		fmt.Printf("generate: wrote %s from %s\n", f.Path, f.Source)
	}
	return nil
}
