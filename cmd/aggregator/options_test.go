package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// TestNotifyStepsAndDigest: --notify-steps takes the fleet's steps only,
// at least one, and --notify-digest 0 (none) to an hour; by default every
// step is told, within a 30 s digest. A bad value stops the start, saying
// which.
func TestNotifyStepsAndDigest(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantSteps []fleet.Step
		wantErr   string
	}{
		{args: nil, wantSteps: fleet.Steps},
		{args: []string{"--notify-steps=draining,back", "--notify-digest=0"}, wantSteps: []fleet.Step{fleet.StepDraining, fleet.StepBack}},
		{args: []string{"--notify-steps=draining,drained"}, wantErr: `--notify-steps: unknown step "drained"`},
		{args: []string{"--notify-steps="}, wantErr: "--notify-steps: name at least one step"},
		{args: []string{"--notify-digest=-1s"}, wantErr: "--notify-digest -1s: want 0 (none) to 1h0m0s"},
		{args: []string{"--notify-digest=2h"}, wantErr: "--notify-digest 2h0m0s"},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		errs := o.notifyProblems()
		if tc.wantErr != "" {
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Errorf("%v: %v; want one error saying %q", tc.args, errs, tc.wantErr)
			}
			continue
		}
		if len(errs) > 0 {
			t.Errorf("%v: %v", tc.args, errs)
		}
		if diff := cmp.Diff(tc.wantSteps, o.notifySteps); diff != "" {
			t.Errorf("%v: steps (-want +got):\n%s", tc.args, diff)
		}
		if tc.args == nil && o.NotifyDigest != 30*time.Second {
			t.Errorf("default digest %s; want 30s", o.NotifyDigest)
		}
	}
}
