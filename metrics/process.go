package metrics

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
)

// RegisterProcess registers the process's and the Go runtime's usual
// series under their usual names: process_resident_memory_bytes,
// process_virtual_memory_bytes, process_cpu_seconds_total,
// process_start_time_seconds, process_open_fds, process_max_fds (read from
// /proc/self, so on Linux only), go_goroutines, go_memstats_heap_alloc_bytes
// and go_memstats_sys_bytes.
func RegisterProcess(reg Registerer) {
	stat := func(read func(procStat) float64) func() (float64, bool) {
		return func() (float64, bool) {
			s, ok := readProcStat()
			if !ok {
				return 0, false
			}
			return read(s), true
		}
	}
	sample := func(name string) func() (float64, bool) {
		return func() (float64, bool) {
			s := []metrics.Sample{{Name: name}}
			metrics.Read(s)
			if s[0].Value.Kind() != metrics.KindUint64 {
				return 0, false
			}
			return float64(s[0].Value.Uint64()), true
		}
	}
	reg.MustRegister(
		newFunc(Opts{Name: "process_resident_memory_bytes", Help: "Resident memory size in bytes."}, "gauge",
			stat(func(s procStat) float64 { return s.rssBytes })),
		newFunc(Opts{Name: "process_virtual_memory_bytes", Help: "Virtual memory size in bytes."}, "gauge",
			stat(func(s procStat) float64 { return s.vsizeBytes })),
		newFunc(Opts{Name: "process_cpu_seconds_total", Help: "Total user and system CPU time spent in seconds."}, "counter",
			stat(func(s procStat) float64 { return s.cpuSeconds })),
		newFunc(Opts{Name: "process_start_time_seconds", Help: "Start time of the process since unix epoch in seconds."}, "gauge",
			stat(func(s procStat) float64 { return s.startSeconds })),
		newFunc(Opts{Name: "process_open_fds", Help: "Number of open file descriptors."}, "gauge", func() (float64, bool) {
			fds, err := os.ReadDir("/proc/self/fd")
			return float64(len(fds)), err == nil
		}),
		newFunc(Opts{Name: "process_max_fds", Help: "Maximum number of open file descriptors."}, "gauge", func() (float64, bool) {
			var l syscall.Rlimit
			err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
			return float64(l.Cur), err == nil
		}),
		newFunc(Opts{Name: "go_goroutines", Help: "Number of goroutines that currently exist."}, "gauge", func() (float64, bool) {
			return float64(runtime.NumGoroutine()), true
		}),
		newFunc(Opts{Name: "go_memstats_heap_alloc_bytes", Help: "Number of heap bytes allocated and still in use."}, "gauge",
			sample("/memory/classes/heap/objects:bytes")),
		newFunc(Opts{Name: "go_memstats_sys_bytes", Help: "Number of bytes obtained from system."}, "gauge",
			sample("/memory/classes/total:bytes")),
	)
}

type procStat struct {
	rssBytes, vsizeBytes, cpuSeconds, startSeconds float64
}

// userHZ is the clock tick of /proc/self/stat's times, 100 on every Linux
// the agent runs on.
const userHZ = 100

// readProcStat reads /proc/self/stat and the boot time from /proc/stat.
func readProcStat() (procStat, bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, false
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after its closing parenthesis, where field 3 (state) is the first.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	field := func(n int) float64 { // n: the field's number in proc(5)
		if n-3 >= len(f) {
			return 0
		}
		v, _ := strconv.ParseFloat(f[n-3], 64)
		return v
	}
	boot := bootTime()
	return procStat{
		cpuSeconds:   (field(14) + field(15)) / userHZ,
		startSeconds: boot + field(22)/userHZ,
		vsizeBytes:   field(23),
		rssBytes:     field(24) * float64(os.Getpagesize()),
	}, true
}

func bootTime() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "btime "); ok {
			t, _ := strconv.ParseFloat(v, 64)
			return t
		}
	}
	return 0
}
