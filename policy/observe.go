package policy

// Observe-only: where the policy asks the agents and the aggregator to
// decide and say everything and change nothing.

import "sigs.k8s.io/yaml"

// Observe is where policy.yaml sets observeOnly: the cluster's value, and
// each pool's that sets its own.
type Observe struct {
	Cluster bool
	Pools   map[string]bool
}

// ObserveOnly reports whether pool's nodes are observed only: the pool's
// own observeOnly where it sets one, else the cluster's.
func (c Config) ObserveOnly(pool string) bool {
	if on, ok := c.Observe.Pools[pool]; ok {
		return on
	}
	return c.Observe.Cluster
}

// observeOf reads only the observeOnly fields of policy.yaml, leniently:
// a mistake elsewhere in the file (which makes the policy invalid) never
// turns a pool that asked to be observed only into one that acts. A file
// that is not YAML sets none.
func observeOf(data string) Observe {
	type scope struct {
		ObserveOnly *bool `json:"observeOnly"`
	}
	var f struct {
		Cluster scope            `json:"cluster"`
		Pools   map[string]scope `json:"pools"`
	}
	_ = yaml.Unmarshal([]byte(data), &f) // lenient: what is readable counts
	o := Observe{Cluster: f.Cluster.ObserveOnly != nil && *f.Cluster.ObserveOnly}
	for name, p := range f.Pools {
		if p.ObserveOnly == nil {
			continue
		}
		if o.Pools == nil {
			o.Pools = map[string]bool{}
		}
		o.Pools[name] = *p.ObserveOnly
	}
	return o
}
