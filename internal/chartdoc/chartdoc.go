// Package chartdoc documents a Helm chart's values from the comments of
// its values.yaml, so that each value is documented once, beside its
// default. A key whose comment starts with "# --" is a value; its comment,
// less the marker, is its description and its default is what values.yaml
// gives. A mapping without such a comment is a group: its keys are
// documented each. A value without a description is an error.
package chartdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The README's markers around the table.
const (
	Begin = "<!-- values: written by make generate from values.yaml; do not edit -->"
	End   = "<!-- /values -->"
)

// Render is readme with the table of values between its markers.
func Render(readme, values []byte) ([]byte, error) {
	before, rest, ok := bytes.Cut(readme, []byte(Begin))
	_, after, ok2 := bytes.Cut(rest, []byte(End))
	if !ok || !ok2 {
		return nil, fmt.Errorf("the README lacks the markers %q and %q", Begin, End)
	}
	rows, err := Values(values)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(before)
	b.WriteString(Begin + "\n| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, r.Type, cell(r.Default), r.Description)
	}
	b.WriteString(End)
	b.Write(after)
	return b.Bytes(), nil
}

// Value is one documented value.
type Value struct {
	Key, Type, Default, Description string
}

// Values lists the documented values of a values.yaml, in its order.
func Values(values []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml is not a mapping")
	}
	var out []Value
	var errs []error
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			desc, documented := description(k.HeadComment)
			switch {
			case documented:
				def, err := defaultOf(v)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", key, err))
				}
				out = append(out, Value{Key: key, Type: typeOf(v), Default: def, Description: desc})
			case v.Kind == yaml.MappingNode && len(v.Content) > 0:
				walk(key+".", v)
			default:
				errs = append(errs, fmt.Errorf("%s has no description (a comment starting with \"# --\" above it)", key))
			}
		}
	}
	walk("", doc.Content[0])
	return out, errors.Join(errs...)
}

// description is the text of a "# --" comment: the lines from the marker
// on, joined.
func description(comment string) (string, bool) {
	lines := strings.Split(comment, "\n")
	for i, l := range lines {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "# --"); ok {
			words := []string{strings.TrimSpace(rest)}
			for _, l := range lines[i+1:] {
				words = append(words, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#")))
			}
			return strings.Join(words, " "), true
		}
	}
	return "", false
}

func typeOf(v *yaml.Node) string {
	switch {
	case v.Kind == yaml.MappingNode:
		return "object"
	case v.Kind == yaml.SequenceNode:
		return "list"
	case v.Tag == "!!int":
		return "int"
	case v.Tag == "!!bool":
		return "bool"
	default:
		return "string"
	}
}

// defaultOf is v as compact JSON.
func defaultOf(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	return string(b), err
}

// cell quotes s for a Markdown table cell.
func cell(s string) string {
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}
