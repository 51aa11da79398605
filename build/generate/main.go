// Command generate writes every generated file of the repository from its
// one source (package internal/generate): run it from the repository's
// root, as make generate does, after changing monitoring/rules.yaml, the
// Grafana dashboard or the chart's values.yaml.
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/maintenance-handler/maintenance-handler/internal/generate"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run() error {
	files, err := generate.Files(".")
	if err != nil {
		return err
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
