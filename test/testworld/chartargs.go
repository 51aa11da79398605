package testworld

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// envReference matches a container's $(VAR) reference to its environment.
var envReference = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// ChartArgs is the args of the first container named container in the
// pod templates of the chart at chart, rendered with helm template and
// args (--set, -f) as a user would, each $(VAR) replaced by the address
// 10.0.0.1, as the kubelet would expand the pod's HOST_IP: what the binary
// would be started with.
func ChartArgs(tb testing.TB, chart, container string, args ...string) []string {
	tb.Helper()
	cmd := exec.Command(Helm(tb), append([]string{"template", "maintenance-handler", chart, "--namespace", "maintenance-handler"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("helm template %v: %v: %s", args, err, stderr.String())
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string
							Args []string
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			tb.Fatalf("helm template %v: %v", args, err)
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			if c.Name != container {
				continue
			}
			for i, a := range c.Args {
				c.Args[i] = envReference.ReplaceAllString(a, "10.0.0.1")
			}
			return c.Args
		}
	}
	tb.Fatalf("helm template %v: no container %s", args, container)
	return nil
}

// EachChartRender calls check with the args the chart at chart starts
// container with, for each render a binary's test holds them to: the
// chart's defaults, the values set (a --set list), and each example
// values file (there must be one); args names the render.
func EachChartRender(tb testing.TB, chart, container, set string, check func(render, args []string)) {
	tb.Helper()
	examples, err := filepath.Glob(chart + "/examples/*.yaml")
	if err != nil || len(examples) == 0 {
		tb.Fatalf("the chart's examples: %v, %v", examples, err)
	}
	renders := [][]string{nil, {"--set", set}}
	for _, f := range examples {
		renders = append(renders, []string{"-f", f})
	}
	for _, r := range renders {
		check(r, ChartArgs(tb, chart, container, r...))
	}
}
