package policy

// The policy ConfigMap's policy.yaml: per-pool settings, windows, exclusions and scopes.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/window"
)

// Policy is the window and exclusions that apply to pool.
func (c Config) Policy(pool string) window.Policy {
	p := c.Cluster
	pc, ok := c.Pools[pool]
	if !ok {
		return p
	}
	if pc.Window != nil {
		p.Window = pc.Window
	}
	p.Exclusions = append(append([]window.Exclusion(nil), c.Cluster.Exclusions...), pc.Exclusions...)
	return p
}

type windowFile struct {
	StartTime  string `json:"startTime"`
	EndTime    string `json:"endTime,omitempty"`
	Duration   string `json:"duration,omitempty"`
	Recurrence string `json:"recurrence,omitempty"`
}

type exclusionFile struct {
	Name      string `json:"name"`
	StartTime string `json:"startTime"`
	EndTime   string `json:"endTime"`
	// Scope is GKE's: no_upgrades (the default), no_minor_or_node_upgrades
	// or no_minor_upgrades (which does not block node maintenance).
	Scope string `json:"scope,omitempty"`
}

type scopeFile struct {
	MaintenanceWindow  *windowFile     `json:"maintenanceWindow,omitempty"`
	Exclusions         []exclusionFile `json:"exclusions,omitempty"`
	GateManualTriggers *bool           `json:"gateManualTriggers,omitempty"`
	// MaxVoluntaryMaintenance is a count (2) or a percentage ("10%").
	MaxVoluntaryMaintenance countOrPercent `json:"maxVoluntaryMaintenance,omitempty"`
	// OpportunisticWhenAutoscaled opts in to opportunistic maintenance in
	// pools the cluster autoscaler manages.
	OpportunisticWhenAutoscaled *bool `json:"opportunisticWhenAutoscaled,omitempty"`
	// Faults finds faulty nodes and bounds their repair (faults.go).
	Faults *faultsFile `json:"faults,omitempty"`
	// ObserveOnly: decide and say, change nothing (Observe).
	ObserveOnly *bool `json:"observeOnly,omitempty"`
}

type poolFile struct {
	scopeFile
	Opportunistic string `json:"opportunistic,omitempty"`
	// Autoscaled declares whether the cluster autoscaler manages the pool.
	Autoscaled *bool `json:"autoscaled,omitempty"`
}

type configFile struct {
	Cluster scopeFile           `json:"cluster"`
	Pools   map[string]poolFile `json:"pools"`
}

// ParseConfig parses policy.yaml and reports every problem at once.
func ParseConfig(data string) (Config, error) {
	var f configFile
	observe := observeOf(data)
	if err := yaml.UnmarshalStrict([]byte(data), &f); err != nil {
		return Config{Observe: observe}, fmt.Errorf("%w: policy.yaml: %w", ErrConfig, err)
	}
	var errs []error
	cfg := Config{Pools: map[string]PoolConfig{}, Observe: observe}
	var err error
	if cfg.Cluster, err = parseScope("cluster", f.Cluster); err != nil {
		errs = append(errs, err)
	} else if err := cfg.Cluster.CheckLimits(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: %w", err))
	}
	if cfg.ClusterFaults, err = parseFaults("cluster.faults", f.Cluster.Faults); err != nil {
		errs = append(errs, err)
	}
	cfg.GateManual = f.Cluster.GateManualTriggers != nil && *f.Cluster.GateManualTriggers
	cfg.WhenAutoscaled = f.Cluster.OpportunisticWhenAutoscaled != nil && *f.Cluster.OpportunisticWhenAutoscaled
	if v := f.Cluster.MaxVoluntaryMaintenance; v != "" {
		if cfg.MaxVoluntary, err = ParseBudget("cluster.maxVoluntaryMaintenance", string(v)); err != nil {
			errs = append(errs, err)
		}
	}
	names := make([]string, 0, len(f.Pools))
	for name := range f.Pools {
		names = append(names, name)
	}
	sort.Strings(names)
	cfg.PoolErrors = map[string]error{}
	var allPoolErrs []error
	for _, name := range names {
		pc, poolErrs := parsePool(name, f.Pools[name])
		if len(poolErrs) == 0 && len(errs) == 0 {
			// GKE's limits hold for what applies to the pool: its window
			// or the cluster's, and the exclusions of both.
			eff := window.Policy{Window: cfg.Cluster.Window, Exclusions: append(slices.Clone(cfg.Cluster.Exclusions), pc.Exclusions...)}
			if pc.Window != nil {
				eff.Window = pc.Window
			}
			if err := eff.CheckLimits(); err != nil {
				poolErrs = append(poolErrs, fmt.Errorf("pools.%s, with the cluster's exclusions: %w", name, err))
			}
		}
		if len(poolErrs) > 0 {
			// This pool only: the others go on.
			cfg.PoolErrors[name] = fmt.Errorf("%w: policy.yaml: %w", ErrConfig, errors.Join(poolErrs...))
			allPoolErrs = append(allPoolErrs, poolErrs...)
			continue
		}
		cfg.Pools[name] = pc
	}
	if len(errs) > 0 {
		// The whole policy is invalid: say every problem at once.
		errs = append(errs, allPoolErrs...)
		return Config{Observe: observe}, fmt.Errorf("%w: policy.yaml: %w", ErrConfig, errors.Join(errs...))
	}
	return cfg, nil
}

// parsePool reads one pool's section, with every problem found in it.
func parsePool(name string, pf poolFile) (PoolConfig, []error) {
	var poolErrs []error
	scope, err := parseScope("pools."+name, pf.scopeFile)
	if err != nil {
		poolErrs = append(poolErrs, err)
	}
	pc := PoolConfig{Window: scope.Window, Exclusions: scope.Exclusions, GateManual: pf.GateManualTriggers,
		Autoscaled: pf.Autoscaled, WhenAutoscaled: pf.OpportunisticWhenAutoscaled}
	if v := pf.MaxVoluntaryMaintenance; v != "" {
		b, err := ParseBudget("pools."+name+".maxVoluntaryMaintenance", string(v))
		if err != nil {
			poolErrs = append(poolErrs, err)
		} else {
			pc.MaxVoluntary = &b
		}
	}
	if pc.Faults, err = parseFaults("pools."+name+".faults", pf.Faults); err != nil {
		poolErrs = append(poolErrs, err)
	}
	if pf.Opportunistic != "" {
		o, err := ParseOpportunistic(pf.Opportunistic)
		if err != nil {
			poolErrs = append(poolErrs, fmt.Errorf("pools.%s.opportunistic: %w", name, err))
		} else {
			pc.Opportunistic = &o
		}
	}
	return pc, poolErrs
}

func parseTime(field, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want RFC 3339, such as 2026-12-05T02:00:00Z", field, v)
	}
	return t.UTC(), nil
}

// minYear is the earliest year a maintenance window may start in.
const minYear = 2000

func parseScope(where string, s scopeFile) (window.Policy, error) {
	var p window.Policy
	var errs []error
	if w := s.MaintenanceWindow; w != nil {
		rw := &window.Recurring{Recurrence: w.Recurrence}
		var err error
		if rw.Start, err = parseTime(where+".maintenanceWindow.startTime", w.StartTime); err != nil {
			errs = append(errs, err)
		} else if y := rw.Start.Year(); y < minYear || y >= window.Horizon {
			errs = append(errs, fmt.Errorf("%s.maintenanceWindow.startTime %s: want a time from the year %d to %d", where, w.StartTime, minYear, window.Horizon-1))
		}
		switch {
		case (w.EndTime == "") == (w.Duration == ""):
			errs = append(errs, fmt.Errorf("%s.maintenanceWindow: give endTime or duration (one of them)", where))
		case w.EndTime != "":
			end, err := parseTime(where+".maintenanceWindow.endTime", w.EndTime)
			if err != nil {
				errs = append(errs, err)
			}
			rw.Duration = end.Sub(rw.Start)
		default:
			if rw.Duration, err = time.ParseDuration(w.Duration); err != nil {
				errs = append(errs, fmt.Errorf("%s.maintenanceWindow.duration %q: want a duration such as 4h", where, w.Duration))
			}
		}
		if len(errs) == 0 && rw.Duration <= 0 {
			errs = append(errs, fmt.Errorf("%s.maintenanceWindow: the window must end after it starts", where))
		}
		if w.Recurrence != "" {
			if rw.Rule, err = window.ParseRule(w.Recurrence); err != nil {
				errs = append(errs, fmt.Errorf("%s.maintenanceWindow.recurrence: %w", where, err))
			}
		}
		if len(errs) == 0 {
			rw.Resolve()
		}
		p.Window = rw
	}
	for i, e := range s.Exclusions {
		field := fmt.Sprintf("%s.exclusions[%d]", where, i)
		start, err1 := parseTime(field+".startTime", e.StartTime)
		end, err2 := parseTime(field+".endTime", e.EndTime)
		switch {
		case err1 != nil || err2 != nil:
			errs = append(errs, errors.Join(err1, err2))
		case !end.After(start):
			errs = append(errs, fmt.Errorf("%s: endTime must be after startTime", field))
		}
		scope, err := window.ParseScope(e.Scope)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%w", field, err))
		}
		name := e.Name
		if name == "" {
			name = fmt.Sprintf("%s[%d]", where, i)
		}
		p.Exclusions = append(p.Exclusions, window.Exclusion{Name: name, Start: start, End: end, Scope: scope})
	}
	return p, errors.Join(errs...)
}
