package policy

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// The fuzz targets' properties: what parses writes back (String) as text
// that parses to the same value; what is refused is an ErrConfig (or, for
// a budget, an error) with a message short enough for an Event. make test
// runs the seeds; make fuzz searches further.

// checkMessage fails t when err's text is too long or not UTF-8.
func checkMessage(t *testing.T, what, in string, err error) {
	t.Helper()
	if msg := err.Error(); len(msg) > 4096 || !utf8.ValidString(msg) {
		t.Errorf("%s(%.80q...): an error of %d bytes (valid UTF-8 %t)", what, in, len(msg), utf8.ValidString(msg))
	}
}

func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"1", "25%", "100%", "0", "101%", "-1", "%", "1.5", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		b, err := ParseBudget("max", v)
		if err != nil {
			checkMessage(t, "ParseBudget", v, err)
			return
		}
		if again, err := ParseBudget("max", b.String()); err != nil || again != b || b.Of(10) < 1 {
			t.Errorf("ParseBudget(%q) = %+v, written %q, read again %+v, %v", v, b, b.String(), again, err)
		}
	})
}

func FuzzParseOpportunistic(f *testing.F) {
	for _, s := range []string{
		"node-idle-time=600s,min-nodes=3,window=2419200s", "node-idle-time=1.5s,min-nodes=0,window=0s,max-unavailable=25%",
		" window=86400s , min-nodes=1, node-idle-time=0.000000001s", "node-idle-time=600s", "min-nodes=-1", "a=b,a=b", ",,,",
		"node-idle-time=4611686018s,min-nodes=1,window=1s", "node-idle-time=600,min-nodes=3,window=2419200s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOpportunistic(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("ParseOpportunistic(%q): %v, not an ErrConfig", s, err)
			}
			checkMessage(t, "ParseOpportunistic", s, err)
			return
		}
		again, err := ParseOpportunistic(o.String())
		if err != nil || !cmp.Equal(o, again) {
			t.Errorf("ParseOpportunistic(%q) = %+v, written %q, read again %+v, %v", s, o, o.String(), again, err)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`
cluster:
  maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 48h, recurrence: "FREQ=WEEKLY;BYDAY=SA"}
  exclusions:
  - {name: year-end, startTime: "2026-12-20T00:00:00Z", endTime: "2027-01-04T00:00:00Z"}
pools:
  a3:
    opportunistic: node-idle-time=600s,min-nodes=3,window=2419200s
    maxVoluntaryMaintenance: 25%
  tpu:
    maintenanceWindow: {startTime: "2026-11-22T22:00:00Z", endTime: "2026-11-23T02:00:00Z", recurrence: FREQ=DAILY}
`,
		`cluster: {gateManualTriggers: true, maxVoluntaryMaintenance: "2"}`,
		`cluster: {maintenanceWindow: {startTime: "0001-01-01T00:00:00Z", duration: 4h, recurrence: "FREQ=DAILY;COUNT=100000000"}}`,
		`pools: {x: {maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 100000h}}}`,
		`pools: {x: {exclusions: [{startTime: a, endTime: b, scope: none}]}}`,
		`unknown: 1`, `[]`, ``, `cluster: {maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 4h, recurrence: "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;COUNT=1000000000"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("ParseConfig: %v, not an ErrConfig", err)
			}
			return
		}
		for pool, perr := range cfg.PoolErrors {
			if !errors.Is(perr, ErrConfig) {
				t.Errorf("pool %s: %v, not an ErrConfig", pool, perr)
			}
		}
	})
}
