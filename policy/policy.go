package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
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

// excerpt is at most maintenance.ExcerptMax bytes of v, in valid UTF-8, for
// a message that shows the value as written.
func excerpt(v string) string { return strings.ToValidUTF8(maintenance.Excerpt(v), "\uFFFD") }

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
			errs = append(errs, fmt.Errorf("%q is not key=value", maintenance.Excerpt(part)))
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
			err = fmt.Errorf("unknown key %q (node-idle-time, min-nodes, window and max-unavailable are known)", maintenance.Excerpt(key))
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
		return Opportunistic{}, fmt.Errorf("%w: opportunistic maintenance %q: %w (want node-idle-time=600s,min-nodes=3,window=2419200s)", ErrConfig, maintenance.Excerpt(s), errors.Join(errs...))
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
	// ClusterFaults, when set, is how every pool without its own finds
	// faulty nodes and bounds their repair (Faults).
	ClusterFaults *Faults
	Pools         map[string]PoolConfig
	// PoolErrors holds the pools whose part of policy.yaml is invalid: no
	// opportunistic action and no manual trigger there, while every other
	// pool goes on.
	PoolErrors map[string]error
	// Version names this policy where its source keeps it (the
	// ConfigMap's resourceVersion: policysource): two Configs of the same
	// non-empty Version are the same, which is how the fleet knows the
	// policy changed without comparing it. Empty: unknown, so a change
	// each time.
	Version string
	// Observe is where the policy asks for observe-only (ObserveOnly);
	// ParseConfig fills it from any policy.yaml that is YAML, even one
	// otherwise invalid.
	Observe Observe
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
	// Faults, when set, replaces the cluster's faults section.
	Faults *Faults
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
