package flagdoc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/flagdoc"
)

// TestCheckChartDefaults: a value that holds its flag's default, or leaves
// it unset and names it (as the same duration, or each item of a list),
// passes; one that holds another, or leaves a default it does not name,
// fails, named; derived values are not compared.
func TestCheckChartDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("timeout", time.Hour, "")
	fs.Int("retries", 5, "")
	fs.String("level", "info", "")
	fs.StringSlice("kinds", []string{"a", "b"}, "")
	fs.String("listen", ":80", "")
	chart := map[string]flagdoc.Chart{
		"timeout": {Value: "x.timeout"}, "retries": {Value: "x.retries"}, "level": {Value: "x.level"},
		"kinds": {Value: "x.kinds"}, "listen": {Value: "x.port"},
	}
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"x:\n  # -- T; empty: 60m.\n  timeout: \"\"\n  # -- R.\n  retries: 5\n  # -- L.\n  level: info\n  # -- K; empty: a and b.\n  kinds: []\n  # -- P.\n  port: 81\n", nil},
		{"x:\n  # -- T.\n  timeout: 1h0m0s\n  # -- R; 0: 5.\n  retries: 0\n  # -- L; empty: info.\n  level: \"\"\n  # -- K.\n  kinds: [a, b]\n  # -- P.\n  port: 81\n", nil},
		{"x:\n  # -- T; empty: 30m.\n  timeout: \"\"\n  # -- R.\n  retries: 3\n  # -- L; empty: warn.\n  level: \"\"\n  # -- K; empty: a.\n  kinds: []\n  # -- P.\n  port: 81\n", []string{
			"--timeout: x.timeout leaves the default, 1h0m0s", "--retries: x.retries is 3", "--level: x.level leaves the default, info", "--kinds: x.kinds leaves the default, [a,b]"}},
		{"x:\n  # -- R.\n  retries: 5\n", []string{"--timeout: the chart has no value x.timeout"}},
	} {
		err := flagdoc.CheckChartDefaults(fs, chart, []byte(tc.values), "x.port")
		if len(tc.want) == 0 && err != nil {
			t.Errorf("CheckChartDefaults of\n%s: %v", tc.values, err)
		}
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckChartDefaults of\n%s: %v, want it to say %q", tc.values, err, want)
			}
		}
	}
}
