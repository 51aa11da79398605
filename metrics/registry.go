package metrics

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The agent and the aggregator write Prometheus's text exposition format
// (version 0.0.4) themselves: counters, gauges and histograms, with labels,
// are all they export. Prometheus's Go client would cost the agent about
// 3 MB of its binary (it gathers through protobuf messages); what this file
// writes is checked by promtool and scraped by a real Prometheus in the
// monitoring tests.

// Opts names a metric: maintenance_handler_<Subsystem>_<Name>, or Name as
// it is when Subsystem is empty.
type Opts struct {
	Subsystem, Name, Help string
}

func (o Opts) fullName() string {
	if o.Subsystem == "" {
		return o.Name
	}
	return namespace + "_" + o.Subsystem + "_" + o.Name
}

// A Collector is a metric family that a Registry writes.
type Collector interface {
	families() []*family
}

// Registerer takes metric families.
type Registerer interface {
	MustRegister(...Collector)
}

// Registry holds metric families and writes them for a scrape.
type Registry struct {
	mu       sync.Mutex
	families []registered
}

type registered struct {
	f           *family
	constLabels []labelPair // labels every series of f carries
}

type labelPair struct{ name, value string }

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// MustRegister adds families; it panics on a name registered twice (a
// programming error, at start-up).
func (r *Registry) MustRegister(cs ...Collector) { r.register(nil, cs) }

func (r *Registry) register(constLabels []labelPair, cs []Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		for _, f := range c.families() {
			for _, g := range r.families {
				if g.f.name == f.name {
					panic("metrics: " + f.name + " registered twice")
				}
			}
			r.families = append(r.families, registered{f: f, constLabels: constLabels})
		}
	}
}

// With returns a Registerer whose families carry the labels (name, value
// pairs) on every series, as well as their own.
func (r *Registry) With(nameValues ...string) Registerer {
	if len(nameValues)%2 != 0 {
		panic("metrics: With needs name, value pairs")
	}
	var ls []labelPair
	for i := 0; i < len(nameValues); i += 2 {
		ls = append(ls, labelPair{nameValues[i], nameValues[i+1]})
	}
	return constRegisterer{r, ls}
}

type constRegisterer struct {
	r  *Registry
	ls []labelPair
}

func (c constRegisterer) MustRegister(cs ...Collector) { c.r.register(c.ls, cs) }

// value is a float64 updated atomically.
type value struct{ bits atomic.Uint64 }

func (v *value) load() float64 { return math.Float64frombits(v.bits.Load()) }

func (v *value) store(f float64) { v.bits.Store(math.Float64bits(f)) }

func (v *value) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Counter only goes up.
type Counter struct {
	v value
	f *family
}

// NewCounter returns a counter (its name should end in _total).
func NewCounter(o Opts) *Counter {
	c := &Counter{}
	c.f = &family{name: o.fullName(), help: o.Help, typ: "counter", series: func() []series { return []series{{value: c.Value()}} }}
	return c
}

// Inc adds one.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d; a negative d is ignored (a counter never goes down).
func (c *Counter) Add(d float64) {
	if d > 0 {
		c.v.add(d)
	}
}

// Value is the count.
func (c *Counter) Value() float64 { return c.v.load() }

func (c *Counter) families() []*family { return []*family{c.f} }

// Gauge goes up and down.
type Gauge struct {
	v value
	f *family
}

// NewGauge returns a gauge.
func NewGauge(o Opts) *Gauge {
	g := &Gauge{}
	g.f = &family{name: o.fullName(), help: o.Help, typ: "gauge", series: func() []series { return []series{{value: g.Value()}} }}
	return g
}

// Set sets the value.
func (g *Gauge) Set(v float64) { g.v.store(v) }

// Value is the value.
func (g *Gauge) Value() float64 { return g.v.load() }

func (g *Gauge) families() []*family { return []*family{g.f} }

// Func is a gauge or a counter whose value a function gives at each
// scrape; a function that answers false has no series.
type Func struct{ f *family }

// NewGaugeFunc returns a gauge read from value at each scrape.
func NewGaugeFunc(o Opts, value func() float64) Func {
	return newFunc(o, "gauge", func() (float64, bool) { return value(), true })
}

func newFunc(o Opts, typ string, value func() (float64, bool)) Func {
	return Func{&family{name: o.fullName(), help: o.Help, typ: typ, series: func() []series {
		if v, ok := value(); ok {
			return []series{{value: v}}
		}
		return nil
	}}}
}

func (f Func) families() []*family { return []*family{f.f} }

// Histogram counts observations in buckets (upper bounds, ascending).
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; the last is above every bound
	sum    value
	f      *family
}

// NewHistogram returns a histogram with the buckets' upper bounds.
func NewHistogram(o Opts, buckets []float64) *Histogram {
	if !slices.IsSorted(buckets) {
		panic("metrics: " + o.fullName() + ": buckets not ascending")
	}
	h := &Histogram{bounds: buckets, counts: make([]atomic.Uint64, len(buckets)+1)}
	h.f = &family{name: o.fullName(), help: o.Help, typ: "histogram", series: func() []series { return []series{{hist: h.snapshot()}} }}
	return h
}

// Observe counts one observation.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v
	h.counts[i].Add(1)
	h.sum.add(v)
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.snapshot().count }

func (h *Histogram) snapshot() *histogramSnapshot {
	s := &histogramSnapshot{bounds: h.bounds, counts: make([]uint64, len(h.bounds)), sum: h.sum.load()}
	for i := range h.counts {
		s.count += h.counts[i].Load()
		if i < len(h.bounds) {
			s.counts[i] = s.count
		}
	}
	return s
}

func (h *Histogram) families() []*family { return []*family{h.f} }

// vec holds one child per set of label values.
type vec[T any] struct {
	labels   []string
	newChild func() *T
	mu       sync.RWMutex
	children map[string]*T
	values   map[string][]string
}

func newVec[T any](labels []string, newChild func() *T) *vec[T] {
	return &vec[T]{labels: labels, newChild: newChild, children: map[string]*T{}, values: map[string][]string{}}
}

// with returns the child for the label values; it panics when their number
// is not the number of labels (a programming error).
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic("metrics: " + strconv.Itoa(len(values)) + " label values for labels " + strings.Join(v.labels, ","))
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	c, ok := v.children[key]
	v.mu.RUnlock()
	if ok {
		return c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[key]; ok {
		return c
	}
	c = v.newChild()
	v.children[key] = c
	v.values[key] = slices.Clone(values)
	return c
}

func (v *vec[T]) series(read func(*T) float64) []series {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]series, 0, len(v.children))
	for k, c := range v.children {
		out = append(out, series{values: v.values[k], value: read(c)})
	}
	return out
}

// Len is the number of series.
func (v *vec[T]) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.children)
}

// CounterVec is a counter per set of label values.
type CounterVec struct {
	*vec[Counter]
	f *family
}

// NewCounterVec returns a counter per set of values of labels.
func NewCounterVec(o Opts, labels []string) *CounterVec {
	v := &CounterVec{vec: newVec(labels, func() *Counter { return &Counter{} })}
	v.f = &family{name: o.fullName(), help: o.Help, typ: "counter", labels: labels,
		series: func() []series { return v.series((*Counter).Value) }}
	return v
}

// WithLabelValues is the counter of the label values, in the labels' order.
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.with(values) }

func (v *CounterVec) families() []*family { return []*family{v.f} }

// GaugeVec is a gauge per set of label values.
type GaugeVec struct {
	*vec[Gauge]
	f *family
}

// NewGaugeVec returns a gauge per set of values of labels.
func NewGaugeVec(o Opts, labels []string) *GaugeVec {
	v := &GaugeVec{vec: newVec(labels, func() *Gauge { return &Gauge{} })}
	v.f = &family{name: o.fullName(), help: o.Help, typ: "gauge", labels: labels,
		series: func() []series { return v.series((*Gauge).Value) }}
	return v
}

// WithLabelValues is the gauge of the label values, in the labels' order.
func (v *GaugeVec) WithLabelValues(values ...string) *Gauge { return v.with(values) }

func (v *GaugeVec) families() []*family { return []*family{v.f} }

// Names lists every family registered, with a series or not, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, g := range r.families {
		names = append(names, g.f.name)
	}
	slices.Sort(names)
	return names
}
