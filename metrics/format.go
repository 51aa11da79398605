package metrics

// Prometheus's text format, written from the registry's families.

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// ContentType is the text exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP writes every family, for a scrape.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	_ = r.Write(w)
}

// Write writes every family that has a series, sorted by name, each
// family's series sorted by their labels.
func (r *Registry) Write(w io.Writer) error {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b registered) int { return strings.Compare(a.f.name, b.f.name) })
	bw := bufio.NewWriter(w)
	for _, g := range fams {
		g.f.write(bw, g.constLabels)
	}
	return bw.Flush()
}

// family is one metric family: its name, help, type, label names, and a
// function that lists its series.
type family struct {
	name, help, typ string
	labels          []string
	series          func() []series
}

// series is one set of label values and its samples: one value, or a
// histogram's buckets, sum and count.
type series struct {
	values []string
	value  float64
	hist   *histogramSnapshot
}

type histogramSnapshot struct {
	bounds []float64
	counts []uint64 // cumulative, one per bound
	sum    float64
	count  uint64
}

func (f *family) write(w *bufio.Writer, constLabels []labelPair) {
	ss := f.series()
	if len(ss) == 0 {
		return
	}
	slices.SortFunc(ss, func(a, b series) int { return slices.Compare(a.values, b.values) })
	w.WriteString("# HELP " + f.name + " " + escapeHelp(f.help) + "\n")
	w.WriteString("# TYPE " + f.name + " " + f.typ + "\n")
	for _, s := range ss {
		pairs := slices.Clone(constLabels)
		for i, n := range f.labels {
			pairs = append(pairs, labelPair{n, s.values[i]})
		}
		slices.SortFunc(pairs, func(a, b labelPair) int { return strings.Compare(a.name, b.name) })
		if s.hist == nil {
			sample(w, f.name, pairs, s.value)
			continue
		}
		for i, b := range s.hist.bounds {
			sample(w, f.name+"_bucket", append(slices.Clone(pairs), labelPair{"le", formatFloat(b)}), float64(s.hist.counts[i]))
		}
		sample(w, f.name+"_bucket", append(slices.Clone(pairs), labelPair{"le", "+Inf"}), float64(s.hist.count))
		sample(w, f.name+"_sum", pairs, s.hist.sum)
		sample(w, f.name+"_count", pairs, float64(s.hist.count))
	}
}

func sample(w *bufio.Writer, name string, pairs []labelPair, v float64) {
	w.WriteString(name)
	if len(pairs) > 0 {
		w.WriteByte('{')
		for i, p := range pairs {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(p.name + `="` + escapeLabel(p.value) + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteString(" " + formatFloat(v) + "\n")
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

func escapeLabel(s string) string { return labelEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
