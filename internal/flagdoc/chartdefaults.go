package flagdoc

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/maintenance-handler/maintenance-handler/internal/chartdoc"
)

// durationWord matches a Go duration in a value's description ("60m").
var durationWord = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h)([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*`)

// CheckChartDefaults says whether the chart's values (values.yaml) keep
// the binary's defaults, for the flags of fs that chart names a value of:
// a value either holds the flag's default, or is unset (empty, 0, false,
// an empty list), gives no flag, and its description names the default
// ("empty: 60m", for a flag whose default is 1h0m0s). derived are the
// values the chart makes a flag of rather than passing (a port for an
// address), which are not compared.
func CheckChartDefaults(fs *pflag.FlagSet, chart map[string]Chart, values []byte, derived ...string) error {
	documented, err := chartdoc.Values(values)
	if err != nil {
		return fmt.Errorf("the chart's values: %w", err)
	}
	byKey := map[string]chartdoc.Value{}
	for _, v := range documented {
		byKey[v.Key] = v
	}
	var errs []string
	for name, c := range chart {
		f := fs.Lookup(name)
		if c.Value == "" || f == nil || slices.Contains(derived, c.Value) {
			continue
		}
		v, ok := byKey[c.Value]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("--%s: the chart has no value %s", name, c.Value))
		case sameValue(v.Default, f.DefValue):
		case unset(v.Default) && mentions(v.Description, f.DefValue):
		case unset(v.Default):
			errs = append(errs, fmt.Sprintf("--%s: %s leaves the default, %s, which its description does not name", name, c.Value, f.DefValue))
		default:
			errs = append(errs, fmt.Sprintf("--%s: %s is %s, not the flag's default %s", name, c.Value, v.Default, f.DefValue))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("the chart's values and the flags' defaults disagree: %s", strings.Join(errs, "; "))
	}
	return nil
}

// unset says whether a value's default (as JSON) gives no flag.
func unset(def string) bool {
	switch def {
	case `""`, "0", "false", "[]", "null":
		return true
	}
	return false
}

// sameValue says whether a value's default (as JSON) is the flag's
// default (as pflag shows it).
func sameValue(def, flagDef string) bool {
	var v any
	if err := json.Unmarshal([]byte(def), &v); err != nil {
		return false
	}
	switch v := v.(type) {
	case []any:
		var words []string
		for _, w := range v {
			words = append(words, fmt.Sprint(w))
		}
		return "["+strings.Join(words, ",")+"]" == flagDef
	case string:
		return v == flagDef || sameDuration(v, flagDef)
	default:
		return fmt.Sprint(v) == flagDef
	}
}

// sameDuration says whether a and b are the same Go duration.
func sameDuration(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

// mentions says whether a description names the flag's default: as
// written, as the same duration, or, for a list, each of its items.
func mentions(desc, flagDef string) bool {
	if items, ok := strings.CutPrefix(flagDef, "["); ok {
		for _, item := range strings.Split(strings.TrimSuffix(items, "]"), ",") {
			if !strings.Contains(desc, item) {
				return false
			}
		}
		return true
	}
	if strings.Contains(desc, flagDef) {
		return true
	}
	for _, w := range durationWord.FindAllString(desc, -1) {
		if sameDuration(w, flagDef) {
			return true
		}
	}
	return false
}
