package aggregator_test

import (
	"testing"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
)

func TestNearLimit(t *testing.T) {
	const limit = 1000
	for _, tc := range []struct {
		name              string
		used, limit       int64
		standing          bool
		warn, standsAfter bool
	}{
		{"well below", 500, limit, false, false, false},
		{"just below the warning", 899, limit, false, false, false},
		{"at the warning", 900, limit, false, true, true},
		{"over it, said already", 990, limit, true, false, true},
		{"between the two, said already: it stands", 850, limit, true, false, true},
		{"between the two, nothing said", 850, limit, false, false, false},
		{"below the rearm: it no longer stands", 799, limit, true, false, false},
		{"over the limit itself", 1200, limit, false, true, true},
		{"no limit known", 1 << 40, 0, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warn, stands := aggregator.NearLimit(tc.used, tc.limit, tc.standing)
			if warn != tc.warn || stands != tc.standsAfter {
				t.Errorf("NearLimit(%d, %d, %t) = %t, %t; want %t, %t", tc.used, tc.limit, tc.standing, warn, stands, tc.warn, tc.standsAfter)
			}
		})
	}
	if aggregator.GoMemory() <= 0 {
		t.Error("GoMemory read nothing")
	}
}
