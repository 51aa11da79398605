package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var gkeLike = Opportunistic{NodeIdleTime: 600 * time.Second, MinNodes: 3, Window: 2419200 * time.Second}

func TestParseOpportunistic(t *testing.T) {
	o, err := ParseOpportunistic("node-idle-time=600s,min-nodes=3,window=2419200s")
	if err != nil || o != gkeLike {
		t.Fatalf("GKE's example: %+v, %v", o, err)
	}
	if o, err := ParseOpportunistic(" window=1.000000001s, node-idle-time=0.5s,min-nodes=0"); err != nil || o.Window != time.Second+1 || o.NodeIdleTime != 500*time.Millisecond {
		t.Errorf("fractions: %+v %v", o, err)
	}
	if got := gkeLike.String(); got != "node-idle-time=600s,min-nodes=3,window=2419200s" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{
		"", "node-idle-time=600,min-nodes=3,window=2419200s", "node-idle-time=10m,min-nodes=3,window=2419200s",
		"node-idle-time=1.0000000001s,min-nodes=3,window=1s", "node-idle-time=600s,min-nodes=-1,window=1s",
		"node-idle-time=600s,window=2419200s", "node-idle-time=600s,min-nodes=3,window=2419200s,speed=fast",
		"node-idle-time=600s,node-idle-time=60s,min-nodes=3,window=1s", "node-idle-time=-5s,min-nodes=3,window=1s",
	} {
		if _, err := ParseOpportunistic(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseOpportunistic(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig(`
cluster:
  maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 48h, recurrence: "FREQ=WEEKLY;BYDAY=SA"}
  exclusions:
  - {name: year-end, startTime: "2026-12-20T00:00:00Z", endTime: "2027-01-04T00:00:00Z"}
pools:
  a3:
    opportunistic: node-idle-time=600s,min-nodes=3,window=2419200s
    exclusions:
    - {name: launch, startTime: "2026-11-25T00:00:00Z", endTime: "2026-11-26T00:00:00Z"}
  tpu:
    maintenanceWindow: {startTime: "2026-11-22T22:00:00Z", endTime: "2026-11-23T02:00:00Z", recurrence: FREQ=DAILY}
`)
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Policy("a3"); len(p.Exclusions) != 2 || p.Window == nil || p.Window.Duration != 48*time.Hour {
		t.Errorf("a3 policy %+v", p)
	}
	if p := cfg.Policy("tpu"); p.Window.Duration != 4*time.Hour || len(p.Exclusions) != 1 {
		t.Errorf("tpu policy %+v", p)
	}
	if r, _ := cfg.Policy("a3").Blocks(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)); r != "excluded" {
		t.Errorf("a3 on launch day: %q", r)
	}
	_, err = ParseConfig(`
cluster:
  maintenanceWindow: {startTime: "tomorrow", duration: 4h, recurrence: "FREQ=WEEKLY;BYDAY=XX"}
pools:
  a3: {opportunistic: "min-nodes=3", colour: blue}
`)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("bad config: %v", err)
	}
	_, err = ParseConfig(`
cluster:
  maintenanceWindow: {startTime: "tomorrow", duration: 4h, recurrence: "FREQ=WEEKLY;BYDAY=XX"}
  exclusions: [{name: x, startTime: "2026-12-02T00:00:00Z", endTime: "2026-12-01T00:00:00Z"}]
pools:
  a3: {opportunistic: "min-nodes=3"}
`)
	for _, want := range []string{"startTime \"tomorrow\"", "BYDAY", "endTime must be after startTime", "node-idle-time is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

func TestManualBlocked(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	text := `
cluster:
  exclusions: [{name: launch, startTime: "2026-11-25T00:00:00Z", endTime: "2026-11-26T00:00:00Z"}]
pools:
  gated: {gateManualTriggers: true}
  windowed:
    gateManualTriggers: true
    maintenanceWindow: {startTime: "2026-11-21T00:00:00Z", duration: 24h, recurrence: "FREQ=WEEKLY;BYDAY=SA"}
`
	cfg, err := ParseConfig(text)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pool string
		at   time.Time
		want string
	}{
		{"ungated", at, ""}, // off by default
		{"gated", at, "excluded"},
		{"gated", at.Add(48 * time.Hour), ""},
		{"windowed", at.Add(48 * time.Hour), "outside_window"},
		{"windowed", time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC), ""},
	} {
		if got, detail := cfg.ManualBlocked(tc.pool, tc.at); got != tc.want {
			t.Errorf("ManualBlocked(%s, %s) = %q (%s), want %q", tc.pool, tc.at, got, detail, tc.want)
		}
	}
	all, err := ParseConfig("cluster: {gateManualTriggers: true}\npools:\n  free: {gateManualTriggers: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if !all.GateManual || all.Pools["free"].GateManual == nil || *all.Pools["free"].GateManual {
		t.Errorf("cluster gate and pool override: %+v", all)
	}
}

// TestInvalidPoolAffectsOnlyThatPool: an invalid pool setting makes that
// pool's part invalid (no opportunistic action, manual triggers refused
// there), and every other pool's policy stands.
func TestInvalidPoolAffectsOnlyThatPool(t *testing.T) {
	cfg, err := ParseConfig(`
cluster:
  exclusions: [{name: launch, startTime: "2026-11-25T00:00:00Z", endTime: "2026-11-26T00:00:00Z"}]
pools:
  good: {opportunistic: "node-idle-time=600s,min-nodes=1,window=86400s"}
  bad: {opportunistic: "min-nodes=3", maxVoluntaryMaintenance: "0"}
`)
	if err != nil {
		t.Fatalf("one bad pool invalidated the whole policy: %v", err)
	}
	if _, ok := cfg.Pools["good"]; !ok {
		t.Error("the good pool's setting is gone")
	}
	perr := cfg.PoolErrors["bad"]
	for _, want := range []string{"pools.bad.opportunistic", "node-idle-time is required", "pools.bad.maxVoluntaryMaintenance"} {
		if perr == nil || !strings.Contains(perr.Error(), want) {
			t.Errorf("the bad pool's error does not say %q: %v", want, perr)
		}
	}
	if !errors.Is(perr, ErrConfig) || cfg.PoolErrors["good"] != nil {
		t.Errorf("pool errors %v", cfg.PoolErrors)
	}
	if _, ok := cfg.Pools["bad"]; ok {
		t.Error("the bad pool's setting was kept")
	}
}

// TestGKELimitsNameTheField: GKE's limits and scopes, checked with errors
// that name the field; a pool is held to them with the cluster's
// exclusions, and only that pool is affected.
func TestGKELimitsNameTheField(t *testing.T) {
	for text, want := range map[string]string{
		`{name: odd, startTime: "2026-12-01T00:00:00Z", endTime: "2026-12-02T00:00:00Z", scope: no_patches}`: `cluster.exclusions[0].scope "no_patches": want no_upgrades`,
		`{name: long, startTime: "2026-12-01T00:00:00Z", endTime: "2027-01-15T00:00:00Z"}`:                   `cluster: exclusion "long" (scope no_upgrades) lasts 1080h; GKE allows at most 720h`,
	} {
		_, err := ParseConfig("cluster:\n  exclusions: [" + text + "]\n")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	_, err := ParseConfig(`cluster: {maintenanceWindow: {startTime: "1999-12-31T00:00:00Z", duration: 4h, recurrence: "FREQ=DAILY;COUNT=100000000"}}`)
	if want := "cluster.maintenanceWindow.startTime 1999-12-31T00:00:00Z: want a time from the year 2000 to 2199"; !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
		t.Errorf("error does not say %q: %v", want, err)
	}
	cfg, err := ParseConfig(`
cluster:
  exclusions:
  - {name: a, startTime: "2026-12-01T00:00:00Z", endTime: "2026-12-02T00:00:00Z"}
  - {name: b, startTime: "2027-01-01T00:00:00Z", endTime: "2027-01-02T00:00:00Z", scope: NO_UPGRADES}
  - {name: long-minor, startTime: "2026-12-01T00:00:00Z", endTime: "2027-03-01T00:00:00Z", scope: no_minor_upgrades}
pools:
  fine:
    exclusions: [{name: c, startTime: "2027-02-01T00:00:00Z", endTime: "2027-02-02T00:00:00Z"}]
  fourth:
    exclusions:
    - {name: c, startTime: "2027-02-01T00:00:00Z", endTime: "2027-02-02T00:00:00Z"}
    - {name: d, startTime: "2027-03-01T00:00:00Z", endTime: "2027-03-02T00:00:00Z"}
  setpos:
    maintenanceWindow: {startTime: "2026-01-30T22:00:00Z", duration: 16h, recurrence: "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"}
`)
	if err != nil {
		t.Fatalf("the cluster's part is within the limits: %v", err)
	}
	if _, ok := cfg.Pools["fine"]; !ok {
		t.Errorf("pool fine: %v", cfg.PoolErrors["fine"])
	}
	if perr := cfg.PoolErrors["fourth"]; perr == nil || !strings.Contains(perr.Error(), "pools.fourth, with the cluster's exclusions: 4 exclusions of scope no_upgrades; GKE allows at most 3") {
		t.Errorf("pool fourth: %v", perr)
	}
	if _, ok := cfg.Pools["setpos"]; !ok {
		t.Errorf("pool setpos (BYSETPOS): %v", cfg.PoolErrors["setpos"])
	}
	// The long no_minor_upgrades exclusion does not block node maintenance.
	if r, _ := cfg.Policy("fine").Blocks(time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC)); r != "" {
		t.Errorf("blocked by a no_minor_upgrades exclusion: %q", r)
	}
}

// TestParseFaults: a faults section for the cluster and one pool; fields
// left out are DefaultFaults'; every problem is said at once, and a pool's
// bad section leaves the others alone.
func TestParseFaults(t *testing.T) {
	cfg, err := ParseConfig(`
cluster:
  faults:
    conditions:
    - type: GPUUnhealthy
      for: 2m
      behavior: UNRECOVERABLE_GPU_ERROR
    maxInRepair: "10%"
pools:
  tpu:
    faults:
      drainTimeout: 10m
      cooldown: 0s
      repairWith: gke
  bad:
    faults:
      conditions:
      - type: ""
        status: Maybe
        behavior: XID
      drainTimeout: soon
      repairWith: smoke
`)
	if err != nil {
		t.Fatal(err)
	}
	want := Faults{Conditions: []FaultCondition{{Type: "GPUUnhealthy", Status: "True", For: 2 * time.Minute, Behavior: "UNRECOVERABLE_GPU_ERROR"}},
		DrainTimeout: 30 * time.Minute, MaxInRepair: Budget{Percent: 10}, Cooldown: 6 * time.Hour}
	if d := cmp.Diff(want, cfg.Faults("a3")); d != "" {
		t.Errorf("the cluster's faults (-want +got):\n%s", d)
	}
	if d := cmp.Diff(Faults{DrainTimeout: 10 * time.Minute, MaxInRepair: Budget{Count: 1}, RepairWith: "gke"}, cfg.Faults("tpu")); d != "" {
		t.Errorf("the pool's faults (-want +got):\n%s", d)
	}
	bad := cfg.PoolErrors["bad"]
	for _, want := range []string{"conditions[0].type", "status \"Maybe\"", "behavior \"XID\"", "drainTimeout \"soon\"", "repairWith \"smoke\""} {
		if bad == nil || !strings.Contains(bad.Error(), want) {
			t.Errorf("the bad pool's error %v does not say %s", bad, want)
		}
	}
	if d := cmp.Diff(DefaultFaults, (Config{}).Faults("any")); d != "" {
		t.Errorf("no faults section (-want +got):\n%s", d)
	}
}

// TestBudgetsAreCountsOrPercentages: a budget is a count, as YAML's
// number or a string, or a percentage; a fraction or a word is refused,
// naming the field.
func TestBudgetsAreCountsOrPercentages(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want Budget
		err  string
	}{
		{"pools: {a3: {maxVoluntaryMaintenance: 2}}", Budget{Count: 2}, ""},
		{`pools: {a3: {maxVoluntaryMaintenance: "2"}}`, Budget{Count: 2}, ""},
		{`pools: {a3: {maxVoluntaryMaintenance: "10%"}}`, Budget{Percent: 10}, ""},
		{"pools: {a3: {maxVoluntaryMaintenance: 2.5}}", Budget{}, "want a whole count or a percentage"},
		{"pools: {a3: {maxVoluntaryMaintenance: two}}", Budget{}, "maxVoluntaryMaintenance"},
		{"pools: {a3: {maxVoluntaryMaintenance: [2]}}", Budget{}, "want a count or a percentage"},
	} {
		cfg, err := ParseConfig(tc.yaml)
		if err == nil {
			err = cfg.PoolErrors["a3"] // a pool's own problem holds only that pool
		}
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error saying %q", tc.yaml, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.yaml, err)
		case cfg.Pools["a3"].MaxVoluntary == nil || *cfg.Pools["a3"].MaxVoluntary != tc.want:
			t.Errorf("%s: budget %+v, want %+v", tc.yaml, cfg.Pools["a3"].MaxVoluntary, tc.want)
		}
	}
}
