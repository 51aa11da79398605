package policy

// policy.yaml's shape as a JSON schema, made from the types ParseConfig
// reads, so that the chart refuses at install what the aggregator would
// refuse at run time: an unknown key, a list for a map, a word for a
// count. What the schema cannot say (a window's recurrence, a duration)
// ParseConfig says, and so does `kubectl gce-maintenance policy validate`.

import (
	"reflect"
	"strings"
)

// Schema is the JSON schema (draft 7, as Helm checks values) of
// policy.yaml.
func Schema() map[string]any {
	return schemaOf(reflect.TypeFor[configFile]())
}

var countOrPercentType = reflect.TypeFor[countOrPercent]()

func schemaOf(t reflect.Type) map[string]any {
	switch {
	case t == countOrPercentType:
		return map[string]any{"type": []any{"integer", "string"}, "pattern": `^[0-9]+%?$`, "minimum": 0}
	case t.Kind() == reflect.Pointer:
		return schemaOf(t.Elem())
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem())}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem())}
	case t.Kind() == reflect.Struct:
		props := map[string]any{}
		addFields(t, props)
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	}
	panic("policy: no schema for " + t.String())
}

// addFields adds the JSON fields of struct t to props, an embedded
// struct's as its own (encoding/json inlines them).
func addFields(t reflect.Type, props map[string]any) {
	for f := range t.Fields() {
		if f.Anonymous {
			addFields(f.Type, props)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		props[name] = schemaOf(f.Type)
	}
}
