// Package computeapi holds Compute Engine API requests and answers to
// Google's own published description of the API: the Compute Engine v1
// discovery document, revision 20261106, as the Google API Go module
// google.golang.org/api v0.313.0 ships it (compute/v1/compute-api.json,
// SHA-256 674aa196e1cff559aee0925237506e7cdf83f0836fb16a5a3c12b3c050731711),
// kept here gzipped (compute-v1-20261106.json.gz) so that a test needs no
// network.
//
// A request is checked for its method and path (one of the document's
// methods, by its flatPath), its query (the method's query parameters and
// the API's standard ones), and its body (the method's request schema, or
// none where it takes none). An answer is checked against the method's
// response schema, or an error against Google's JSON error envelope
// (https://cloud.google.com/apis/design/errors: error.code, message,
// status, errors[]). Every object is closed: a field the description does
// not name, a value outside a field's enum, a value of the wrong type, an
// int64 not written as a decimal string, or a timestamp that is not RFC
// 3339 where the description says it is, is a problem.
//
// What it does not do: check what a value means (a resource name's shape,
// whether a count is right). The emulator's tests do that.
//
// Concurrency: a Description is read only, and safe for concurrent use.
package computeapi

import (
	"bytes"
	"cmp"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Revision is the discovery document's revision, and Source where it was
// taken from.
const (
	Revision = "20261106"
	Source   = "google.golang.org/api v0.313.0 compute/v1/compute-api.json"
)

//go:embed compute-v1-20261106.json.gz
var document []byte

// Description is the Compute Engine v1 API as its discovery document
// describes it.
type Description struct {
	Revision    string               `json:"revision"`
	ServicePath string               `json:"servicePath"`
	Parameters  map[string]Parameter `json:"parameters"`
	Schemas     map[string]*Schema   `json:"schemas"`
	Resources   map[string]*resource `json:"resources"`
	methods     []*Method
}

// Parameter is a method's (or the API's standard) parameter.
type Parameter struct {
	Location string   `json:"location"`
	Type     string   `json:"type"`
	Enum     []string `json:"enum"`
}

// Schema is a schema of the document: an object's fields, an array's
// items, a scalar's type, format and enum.
type Schema struct {
	ID                   string             `json:"id"`
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Description          string             `json:"description"`
	Enum                 []string           `json:"enum"`
	Properties           map[string]*Schema `json:"properties"`
	Items                *Schema            `json:"items"`
	AdditionalProperties *Schema            `json:"additionalProperties"`
}

type resource struct {
	Methods   map[string]*Method   `json:"methods"`
	Resources map[string]*resource `json:"resources"`
}

// Method is one method of the API.
type Method struct {
	// ID is the method's name, such as compute.instances.get.
	ID         string               `json:"id"`
	HTTPMethod string               `json:"httpMethod"`
	FlatPath   string               `json:"flatPath"`
	Path       string               `json:"path"`
	Parameters map[string]Parameter `json:"parameters"`
	Request    *Schema              `json:"request"`
	Response   *Schema              `json:"response"`
}

// Load reads the document once.
var Load = sync.OnceValues(func() (*Description, error) {
	zr, err := gzip.NewReader(bytes.NewReader(document))
	if err != nil {
		return nil, fmt.Errorf("compute discovery document: %w", err)
	}
	var d Description
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		return nil, fmt.Errorf("compute discovery document: %w", err)
	}
	var walk func(map[string]*resource)
	walk = func(rs map[string]*resource) {
		for _, r := range rs {
			for _, m := range r.Methods {
				if m.FlatPath == "" {
					m.FlatPath = m.Path
				}
				d.methods = append(d.methods, m)
			}
			walk(r.Resources)
		}
	}
	walk(d.Resources)
	sort.Slice(d.methods, func(i, j int) bool { return d.methods[i].ID < d.methods[j].ID })
	return &d, nil
})

// Method finds the method a request of httpMethod on path (the URL's path,
// from the service path on: projects/p/zones/z/...) calls; nil when none.
func (d *Description) Method(httpMethod, path string) *Method {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, m := range d.methods {
		if m.HTTPMethod == httpMethod && matches(strings.Split(m.FlatPath, "/"), segs) {
			return m
		}
	}
	return nil
}

// MethodByID finds a method by its ID; nil when none.
func (d *Description) MethodByID(id string) *Method {
	for _, m := range d.methods {
		if m.ID == id {
			return m
		}
	}
	return nil
}

func matches(tmpl, segs []string) bool {
	if len(tmpl) != len(segs) {
		return false
	}
	for i, t := range tmpl {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if t != segs[i] {
			return false
		}
	}
	return true
}

// Request checks a request: its method and path (from the service path
// on), query and body. m is the method it calls (nil when none).
func (d *Description) Request(httpMethod, path string, query url.Values, body []byte) (m *Method, problems []string) {
	m = d.Method(httpMethod, path)
	if m == nil {
		return nil, []string{fmt.Sprintf("%s %s is no method of Compute Engine v1", httpMethod, path)}
	}
	for _, k := range slices.Sorted(maps.Keys(query)) {
		p, ok := m.Parameters[k]
		if !ok {
			p, ok = d.Parameters[k]
		}
		switch {
		case !ok || p.Location != "query":
			problems = append(problems, fmt.Sprintf("%s: query parameter %q is not one of the method's", m.ID, k))
		case len(p.Enum) > 0 && !slices.Contains(p.Enum, query.Get(k)):
			problems = append(problems, fmt.Sprintf("%s: query parameter %s=%q is none of %v", m.ID, k, query.Get(k), p.Enum))
		}
	}
	switch {
	case m.Request == nil && len(bytes.TrimSpace(body)) > 0:
		problems = append(problems, fmt.Sprintf("%s takes no body; got %q", m.ID, body))
	case m.Request != nil:
		problems = append(problems, d.check(m.ID+" request", body, m.Request)...)
	}
	return m, problems
}

// Response checks an answer of status with body to a call of m.
func (d *Description) Response(m *Method, status int, body []byte) []string {
	if status/100 != 2 {
		return d.checkError(m.ID+" error", status, body)
	}
	if m.Response == nil {
		return nil
	}
	return d.check(m.ID+" response", body, m.Response)
}

// Check checks body as a value of the schema named ref.
func (d *Description) Check(what string, body []byte, ref string) []string {
	return d.check(what, body, &Schema{Ref: ref})
}

func (d *Description) check(what string, body []byte, s *Schema) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{fmt.Sprintf("%s: not JSON: %v", what, err)}
	}
	var problems []string
	d.value(what, v, s, &problems)
	return problems
}

// errorEnvelope is Google's JSON error body
// (https://cloud.google.com/apis/design/errors#http_mapping), which the
// discovery document does not describe.
var errorEnvelope = &Schema{Type: "object", Properties: map[string]*Schema{
	"error": {Type: "object", Properties: map[string]*Schema{
		"code":    {Type: "integer", Format: "int32"},
		"message": {Type: "string"},
		"status": {Type: "string", Enum: []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
			"PERMISSION_DENIED", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
			"UNAVAILABLE", "DATA_LOSS"}},
		"errors": {Type: "array", Items: &Schema{Type: "object", Properties: map[string]*Schema{
			"message": {Type: "string"}, "domain": {Type: "string"}, "reason": {Type: "string"},
			"location": {Type: "string"}, "locationType": {Type: "string"},
		}}},
		"details": {Type: "array", Items: &Schema{Type: "any"}},
	}},
}}

func (d *Description) checkError(what string, status int, body []byte) []string {
	problems := d.check(what, body, errorEnvelope)
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && (e.Error.Code != status || e.Error.Message == "") {
		problems = append(problems, fmt.Sprintf("%s: error.code %d and message %q; want the HTTP status %d and a message", what, e.Error.Code, e.Error.Message, status))
	}
	return problems
}

func (d *Description) value(at string, v any, s *Schema, problems *[]string) {
	if s.Ref != "" {
		r, ok := d.Schemas[s.Ref]
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: schema %s is not in the description", at, s.Ref))
			return
		}
		s = r
	}
	bad := func(format string, args ...any) {
		*problems = append(*problems, at+": "+fmt.Sprintf(format, args...))
	}
	switch s.Type {
	case "any":
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("%s; want an object (%s)", kind(v), s.ID)
			return
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			p, ok := s.Properties[k]
			if !ok {
				p = s.AdditionalProperties
			}
			if p == nil {
				bad("unknown field %q (%s has %s)", k, cmp.Or(s.ID, "the object"), strings.Join(slices.Sorted(maps.Keys(s.Properties)), ", "))
				continue
			}
			d.value(at+"."+k, obj[k], p, problems)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("%s; want an array", kind(v))
			return
		}
		for i, e := range arr {
			d.value(fmt.Sprintf("%s[%d]", at, i), e, s.Items, problems)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("%s; want a string", kind(v))
			return
		}
		switch {
		case len(s.Enum) > 0 && !slices.Contains(s.Enum, str):
			bad("%q is none of %v", str, s.Enum)
		case s.Format == "int64" || s.Format == "uint64":
			if _, err := strconv.ParseInt(strings.TrimPrefix(str, "-"), 10, 64); err != nil {
				if _, err := strconv.ParseUint(str, 10, 64); err != nil {
					bad("%q is not a decimal %s", str, s.Format)
				}
			}
		case strings.Contains(s.Description, "RFC3339") && str != "":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("%q is not an RFC 3339 time", str)
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			bad("%s; want an integer", kind(v))
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			bad("%s is not an integer", n)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("%s; want a number", kind(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%s; want a boolean", kind(v))
		}
	default:
		bad("the description's type %q is not known here", s.Type)
	}
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// Exchange is one request to the Compute API and its answer, as a
// recording of them holds it.
type Exchange struct {
	Method string
	// Path is the URL's path from the service path on.
	Path   string
	Query  url.Values
	Body   []byte
	Status int
	Answer []byte
}

// Exchange checks both sides of e; the method it called is nil when none.
func (d *Description) Exchange(e Exchange) (*Method, []string) {
	m, problems := d.Request(e.Method, e.Path, e.Query, e.Body)
	if m == nil {
		return nil, problems
	}
	if e.Status == http.StatusMethodNotAllowed {
		return m, problems
	}
	return m, append(problems, d.Response(m, e.Status, e.Answer)...)
}
