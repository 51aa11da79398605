package main

import (
	"errors"
	"strings"
)

// stampImage sets the chart's default image.repository (values.yaml's
// top-level image: block, its two-space-indented repository: line) to
// repository, so that the released chart installs the released image with
// no value set. Every other line, comments included, is kept.
func stampImage(values []byte, repository string) ([]byte, error) {
	lines := strings.Split(string(values), "\n")
	inImage, set := false, 0
	for i, line := range lines {
		switch {
		case line == "image:":
			inImage = true
		case line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#"):
			inImage = false
		case inImage && strings.HasPrefix(line, "  repository:"):
			lines[i] = "  repository: " + repository
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("the chart's values.yaml has no one image.repository to stamp (a line `  repository:` under a top-level `image:`)")
	}
	return []byte(strings.Join(lines, "\n")), nil
}
