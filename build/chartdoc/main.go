// Command chartdoc writes the chart's table of values into its README,
// between the markers chartdoc.Begin and chartdoc.End, from the comments
// of its values.yaml (package internal/chartdoc):
//
//	go run ./build/chartdoc charts/maintenance-handler
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/maintenance-handler/maintenance-handler/internal/chartdoc"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chartdoc CHART_DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chartdoc:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return err
	}
	out, err := chartdoc.Render(readme, values)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), out, 0o644)
}
