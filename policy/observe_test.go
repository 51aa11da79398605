package policy

import (
	"errors"
	"testing"
)

func TestObserveOnlyByPool(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		invalid    bool
		want       map[string]bool // pool: observed only
	}{
		{name: "none", yaml: "pools:\n  a: {}\n", want: map[string]bool{"a": false, "other": false}},
		{name: "cluster", yaml: "cluster:\n  observeOnly: true\n", want: map[string]bool{"a": true, "other": true}},
		{name: "one pool", yaml: "pools:\n  a:\n    observeOnly: true\n", want: map[string]bool{"a": true, "other": false}},
		{name: "a pool acts in an observed cluster", yaml: "cluster:\n  observeOnly: true\npools:\n  a:\n    observeOnly: false\n",
			want: map[string]bool{"a": false, "other": true}},
		{name: "a pool invalid elsewhere stays observed", yaml: "pools:\n  a:\n    observeOnly: true\n    maxVoluntaryMaintenance: lots\n",
			want: map[string]bool{"a": true, "other": false}},
		{name: "a misspelt key elsewhere keeps the cluster observed", yaml: "cluster:\n  observeOnly: true\n  maintenanceWindw: {}\n", invalid: true,
			want: map[string]bool{"a": true, "other": true}},
		{name: "not a boolean", yaml: "cluster:\n  observeOnly: sometimes\n", invalid: true, want: map[string]bool{"a": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(tc.yaml)
			if tc.invalid != (err != nil) {
				t.Fatalf("ParseConfig error = %v, want invalid %v", err, tc.invalid)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
			for pool, want := range tc.want {
				if got := cfg.ObserveOnly(pool); got != want {
					t.Errorf("ObserveOnly(%q) = %v, want %v", pool, got, want)
				}
			}
		})
	}
}
