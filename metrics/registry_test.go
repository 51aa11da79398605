package metrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestRegistryWritesTheTextFormat: what a scrape reads, exactly, and as
// Prometheus's own parser reads it.
func TestRegistryWritesTheTextFormat(t *testing.T) {
	reg := NewRegistry()
	c := NewCounterVec(Opts{Subsystem: "agent", Name: "things_total", Help: "Things\\done,\nby outcome."}, []string{"outcome"})
	h := NewHistogram(Opts{Subsystem: "agent", Name: "wait_seconds", Help: "Waits."}, []float64{0.5, 1, 5})
	g := NewGauge(Opts{Subsystem: "agent", Name: "level", Help: "A level."})
	empty := NewGaugeVec(Opts{Subsystem: "agent", Name: "unused", Help: "No series yet."}, []string{"key"})
	reg.With("node_name", "gpu-0", "node_pool_name", "a3").MustRegister(c, h)
	reg.MustRegister(g, empty, NewGaugeFunc(Opts{Name: "up_now", Help: "Read at scrape."}, func() float64 { return 2 }))
	c.WithLabelValues(`say "hi"`).Add(2)
	c.WithLabelValues("evicted").Inc()
	c.WithLabelValues("evicted").Add(-5) // ignored: a counter never goes down
	for _, v := range []float64{0.2, 0.5, 0.7, 7} {
		h.Observe(v)
	}
	g.Set(-1.5)
	want := `# HELP maintenance_handler_agent_level A level.
# TYPE maintenance_handler_agent_level gauge
maintenance_handler_agent_level -1.5
# HELP maintenance_handler_agent_things_total Things\\done,\nby outcome.
# TYPE maintenance_handler_agent_things_total counter
maintenance_handler_agent_things_total{node_name="gpu-0",node_pool_name="a3",outcome="evicted"} 1
maintenance_handler_agent_things_total{node_name="gpu-0",node_pool_name="a3",outcome="say \"hi\""} 2
# HELP maintenance_handler_agent_wait_seconds Waits.
# TYPE maintenance_handler_agent_wait_seconds histogram
maintenance_handler_agent_wait_seconds_bucket{node_name="gpu-0",node_pool_name="a3",le="0.5"} 2
maintenance_handler_agent_wait_seconds_bucket{node_name="gpu-0",node_pool_name="a3",le="1"} 3
maintenance_handler_agent_wait_seconds_bucket{node_name="gpu-0",node_pool_name="a3",le="5"} 3
maintenance_handler_agent_wait_seconds_bucket{node_name="gpu-0",node_pool_name="a3",le="+Inf"} 4
maintenance_handler_agent_wait_seconds_sum{node_name="gpu-0",node_pool_name="a3"} 8.4
maintenance_handler_agent_wait_seconds_count{node_name="gpu-0",node_pool_name="a3"} 4
# HELP up_now Read at scrape.
# TYPE up_now gauge
up_now 2
`
	var b strings.Builder
	if err := reg.Write(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", b.String(), want)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("Prometheus's parser: %v", err)
	}
	if got := fams["maintenance_handler_agent_wait_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); got != 4 {
		t.Errorf("parsed histogram count %d, want 4", got)
	}
	if h.Count() != 4 || c.Len() != 2 || empty.Len() != 0 {
		t.Errorf("count %d, series %d and %d; want 4, 2 and 0", h.Count(), c.Len(), empty.Len())
	}
}

func TestRegistryRefusesANameTwice(t *testing.T) {
	reg := NewRegistry()
	reg.MustRegister(NewCounter(Opts{Name: "a_total"}))
	defer func() {
		if recover() == nil {
			t.Error("a second a_total was registered")
		}
	}()
	reg.MustRegister(NewGauge(Opts{Name: "a_total"}))
}

// TestCountersAddUpUnderConcurrency: run with -race.
func TestCountersAddUpUnderConcurrency(t *testing.T) {
	c := NewCounterVec(Opts{Name: "n_total"}, []string{"k"})
	reg := NewRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.WithLabelValues("x").Add(0.5)
				_ = reg.Write(&strings.Builder{})
			}
		})
	}
	wg.Wait()
	if got := c.WithLabelValues("x").Value(); got != 4000 {
		t.Errorf("counted %v, want 4000", got)
	}
}

// TestProcessSeries: the usual process and runtime series, with values.
func TestProcessSeries(t *testing.T) {
	reg := NewRegistry()
	RegisterProcess(reg)
	var b strings.Builder
	if err := reg.Write(&b); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"process_resident_memory_bytes", "process_virtual_memory_bytes", "process_start_time_seconds",
		"process_open_fds", "process_max_fds", "go_goroutines", "go_memstats_heap_alloc_bytes", "go_memstats_sys_bytes"} {
		f, ok := fams[name]
		if !ok || f.GetMetric()[0].GetGauge().GetValue() <= 0 {
			t.Errorf("%s: %v, want a positive gauge", name, f)
		}
	}
	if _, ok := fams["process_cpu_seconds_total"]; !ok {
		t.Error("no process_cpu_seconds_total")
	}
}
