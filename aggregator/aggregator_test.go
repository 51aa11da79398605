package aggregator

import (
	"errors"
	"strings"
	"testing"
)

// TestNewRejectsOrDefaults: a zero Options is refused, naming every
// missing field; the optional fields take Default's values.
func TestNewRejectsOrDefaults(t *testing.T) {
	_, err := New(Options{})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New(Options{}) = %v, want ErrInvalidOptions", err)
	}
	for _, field := range []string{"Client", "Namespace", "Identity"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("%q does not name %s", err, field)
		}
	}
	got := Options{}.withDefaults()
	if got.Interval != Default.Interval || got.LeaseName != Default.LeaseName || got.PoolLabel != Default.PoolLabel ||
		got.RecreateWindow != Default.RecreateWindow || got.Metrics == nil || got.Clock == nil {
		t.Errorf("defaults not taken: %+v", got)
	}
}
