package policy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/window"
)

// Opportunistic is a pool's opportunistic maintenance setting, written in
// gcloud's syntax: node-idle-time=600s,min-nodes=3,window=2419200s.
type Opportunistic struct {
	// NodeIdleTime is how long a node must have been idle.
	NodeIdleTime time.Duration
	// MinNodes is how many nodes of the pool must stay Ready and out of
	// maintenance.
	MinNodes int
	// Window is how long before the notice's window start a node may be
	// picked.
	Window time.Duration
	// MaxUnavailable, when set (the optional key max-unavailable), caps
	// the pool's nodes in voluntary maintenance at once.
	MaxUnavailable *Budget
}

func (o Opportunistic) String() string {
	s := fmt.Sprintf("node-idle-time=%s,min-nodes=%d,window=%s", Seconds(o.NodeIdleTime), o.MinNodes, Seconds(o.Window))
	if o.MaxUnavailable != nil {
		s += ",max-unavailable=" + o.MaxUnavailable.String()
	}
	return s
}

// Seconds writes d as the gcloud syntax does: "600s", "1.5s".
func Seconds(d time.Duration) string {
	s := strconv.FormatInt(int64(d/time.Second), 10)
	if frac := d % time.Second; frac != 0 {
		if frac < 0 {
			frac = -frac
			if d > -time.Second {
				s = "-" + s
			}
		}
		s += "." + strings.TrimRight(fmt.Sprintf("%09d", int64(frac)), "0")
	}
	return s + "s"
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid configuration")

var secondsRE = regexp.MustCompile(`^([0-9]+)(\.([0-9]{1,9}))?s$`)

// parseSeconds parses a duration in seconds with up to nine fractional
// digits and a trailing "s" (protobuf Duration's JSON form): "600s", "1.5s".
func parseSeconds(key, v string) (time.Duration, error) {
	m := secondsRE.FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%s=%s: want seconds with up to nine fractional digits and a trailing s, such as 600s", key, excerpt(v))
	}
	whole, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || whole > int64(1<<62/time.Second) {
		return 0, fmt.Errorf("%s=%s: too large", key, excerpt(v))
	}
	d := time.Duration(whole) * time.Second
	if m[3] != "" {
		frac, _ := strconv.ParseInt(m[3]+strings.Repeat("0", 9-len(m[3])), 10, 64)
		d += time.Duration(frac)
	}
	return d, nil
}

// excerpt is at most metadata.ExcerptMax bytes of v, in valid UTF-8, for
// a message that shows the value as written.
func excerpt(v string) string { return strings.ToValidUTF8(metadata.Excerpt(v), "\uFFFD") }

// maxProblems is how many problems of one value an error names.
const maxProblems = 5

// ParseOpportunistic parses the gcloud syntax. All three keys are required
// (an omitted min-nodes must never mean zero); unknown or repeated keys are
// errors.
func ParseOpportunistic(s string) (Opportunistic, error) {
	var o Opportunistic
	var errs []error
	seen := map[string]bool{}
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not key=value", metadata.Excerpt(part)))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("%s given twice", excerpt(key)))
			continue
		}
		seen[key] = true
		var err error
		switch key {
		case "node-idle-time":
			o.NodeIdleTime, err = parseSeconds(key, val)
		case "window":
			o.Window, err = parseSeconds(key, val)
		case "min-nodes":
			o.MinNodes, err = strconv.Atoi(val)
			if err != nil || o.MinNodes < 0 {
				err = fmt.Errorf("min-nodes=%s: want a whole number, 0 or more", excerpt(val))
			}
		case "max-unavailable":
			var b Budget
			if b, err = ParseBudget(key, val); err == nil {
				o.MaxUnavailable = &b
			}
		default:
			err = fmt.Errorf("unknown key %q (node-idle-time, min-nodes, window and max-unavailable are known)", metadata.Excerpt(key))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, key := range []string{"node-idle-time", "min-nodes", "window"} {
		if !seen[key] {
			errs = append(errs, fmt.Errorf("%s is required", key))
		}
	}
	if len(errs) > 0 {
		if len(errs) > maxProblems {
			errs = append(errs[:maxProblems:maxProblems], fmt.Errorf("and %d more", len(errs)-maxProblems))
		}
		return Opportunistic{}, fmt.Errorf("%w: opportunistic maintenance %q: %w (want node-idle-time=600s,min-nodes=3,window=2419200s)", ErrConfig, metadata.Excerpt(s), errors.Join(errs...))
	}
	return o, nil
}

// Config is the aggregator's configuration (the ConfigMap's policy.yaml).
type Config struct {
	// Cluster applies to every pool without its own window; its exclusions
	// apply to every pool.
	Cluster window.Policy
	// GateManual: windows and exclusions also gate manual triggers (the
	// perform-maintenance label set by a person). Off by default.
	GateManual bool
	// MaxVoluntary caps the cluster's nodes in voluntary maintenance at
	// once (zero: DefaultClusterBudget).
	MaxVoluntary Budget
	// WhenAutoscaled: opportunistic maintenance also in pools the cluster
	// autoscaler manages. Off by default.
	WhenAutoscaled bool
	Pools          map[string]PoolConfig
	// PoolErrors holds the pools whose part of policy.yaml is invalid: no
	// opportunistic action and no manual trigger there, while every other
	// pool goes on.
	PoolErrors map[string]error
}

// PoolBudget is the cap on pool's nodes in voluntary maintenance: the
// ConfigMap's, else the pool setting's max-unavailable, else
// DefaultPoolBudget, or, for a pool of multi-host slices (slices), every
// node: a slice goes down whole, so a cap of one node would never let it.
func (c Config) PoolBudget(pool string, o Opportunistic, slices bool) Budget {
	if pc, ok := c.Pools[pool]; ok && pc.MaxVoluntary != nil {
		return *pc.MaxVoluntary
	}
	if o.MaxUnavailable != nil {
		return *o.MaxUnavailable
	}
	if slices {
		return Budget{Percent: 100}
	}
	return DefaultPoolBudget
}

// ClusterBudget is the cap on the cluster's nodes in voluntary maintenance.
func (c Config) ClusterBudget() Budget {
	if c.MaxVoluntary == (Budget{}) {
		return DefaultClusterBudget
	}
	return c.MaxVoluntary
}

// PoolConfig is one pool's part of Config.
type PoolConfig struct {
	// Opportunistic, when set, wins over the nodes' annotation.
	Opportunistic *Opportunistic
	// Window replaces the cluster's window; Exclusions add to the
	// cluster's.
	Window     *window.Recurring
	Exclusions []window.Exclusion
	// GateManual, when set, replaces the cluster's GateManual.
	GateManual *bool
	// MaxVoluntary, when set, caps the pool's nodes in voluntary
	// maintenance at once.
	MaxVoluntary *Budget
	// Autoscaled, when set, says whether the cluster autoscaler manages
	// the pool, whatever its status says.
	Autoscaled *bool
	// WhenAutoscaled, when set, replaces the cluster's WhenAutoscaled.
	WhenAutoscaled *bool
}

// Autoscaled reports whether the cluster autoscaler manages pool: as the
// policy declares, else as detected.
func (c Config) Autoscaled(pool string, detected bool) bool {
	if pc, ok := c.Pools[pool]; ok && pc.Autoscaled != nil {
		return *pc.Autoscaled
	}
	return detected
}

// AllowAutoscaled reports whether opportunistic maintenance goes on in
// pool though the cluster autoscaler manages it.
func (c Config) AllowAutoscaled(pool string) bool {
	if pc, ok := c.Pools[pool]; ok && pc.WhenAutoscaled != nil {
		return *pc.WhenAutoscaled
	}
	return c.WhenAutoscaled
}

// ManualBlocked reports why a manual trigger on a node of pool is refused
// at t ("" if it is not): only when the policy gates manual triggers for
// the pool, and then as the window and exclusions say.
func (c Config) ManualBlocked(pool string, t time.Time) (reason, detail string) {
	gate := c.GateManual
	if pc, ok := c.Pools[pool]; ok && pc.GateManual != nil {
		gate = *pc.GateManual
	}
	if !gate {
		return "", ""
	}
	return c.Policy(pool).Blocks(t)
}

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
	// MaxVoluntaryMaintenance is a count ("2") or a percentage ("10%").
	MaxVoluntaryMaintenance string `json:"maxVoluntaryMaintenance,omitempty"`
	// OpportunisticWhenAutoscaled opts in to opportunistic maintenance in
	// pools the cluster autoscaler manages.
	OpportunisticWhenAutoscaled *bool `json:"opportunisticWhenAutoscaled,omitempty"`
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
	if err := yaml.UnmarshalStrict([]byte(data), &f); err != nil {
		return Config{}, fmt.Errorf("%w: policy.yaml: %w", ErrConfig, err)
	}
	var errs []error
	cfg := Config{Pools: map[string]PoolConfig{}}
	var err error
	if cfg.Cluster, err = parseScope("cluster", f.Cluster); err != nil {
		errs = append(errs, err)
	} else if err := cfg.Cluster.CheckLimits(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: %w", err))
	}
	cfg.GateManual = f.Cluster.GateManualTriggers != nil && *f.Cluster.GateManualTriggers
	cfg.WhenAutoscaled = f.Cluster.OpportunisticWhenAutoscaled != nil && *f.Cluster.OpportunisticWhenAutoscaled
	if v := f.Cluster.MaxVoluntaryMaintenance; v != "" {
		if cfg.MaxVoluntary, err = ParseBudget("cluster.maxVoluntaryMaintenance", v); err != nil {
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
		pf := f.Pools[name]
		var poolErrs []error
		scope, err := parseScope("pools."+name, pf.scopeFile)
		if err != nil {
			poolErrs = append(poolErrs, err)
		}
		pc := PoolConfig{Window: scope.Window, Exclusions: scope.Exclusions, GateManual: pf.GateManualTriggers,
			Autoscaled: pf.Autoscaled, WhenAutoscaled: pf.OpportunisticWhenAutoscaled}
		if v := pf.MaxVoluntaryMaintenance; v != "" {
			b, err := ParseBudget("pools."+name+".maxVoluntaryMaintenance", v)
			if err != nil {
				poolErrs = append(poolErrs, err)
			} else {
				pc.MaxVoluntary = &b
			}
		}
		if pf.Opportunistic != "" {
			o, err := ParseOpportunistic(pf.Opportunistic)
			if err != nil {
				poolErrs = append(poolErrs, fmt.Errorf("pools.%s.opportunistic: %w", name, err))
			} else {
				pc.Opportunistic = &o
			}
		}
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
		return Config{}, fmt.Errorf("%w: policy.yaml: %w", ErrConfig, errors.Join(errs...))
	}
	return cfg, nil
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
