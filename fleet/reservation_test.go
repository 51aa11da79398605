package fleet

import (
	"testing"
	"time"
)

// TestUnusedCapacityFirst: a GROUPED block with its maintenance pending in
// a known window and spare hosts is maintained there first, once per
// window; not one with no spare host, none pending, its maintenance under
// way, an INDEPENDENT one, or one whose window is not given (no cycle to
// name its request by).
func TestUnusedCapacityFirst(t *testing.T) {
	w := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	blocks := []ReservationBlock{
		{Name: "spare", Grouped: true, Pending: 6, Count: 18, InUse: 16, Window: w},
		{Name: "full", Grouped: true, Pending: 6, Count: 16, InUse: 16, Window: w},
		{Name: "quiet", Grouped: true, Count: 18, InUse: 16},
		{Name: "under-way", Grouped: true, Pending: 3, Ongoing: 3, Count: 18, InUse: 16, Window: w},
		{Name: "asked", Grouped: true, Pending: 6, Count: 18, InUse: 16, Window: w},
		{Name: "asked-before", Grouped: true, Pending: 6, Count: 18, InUse: 16, Window: w},
		{Name: "independent", Pending: 6, Count: 18, InUse: 16, Window: w},
		{Name: "no-window", Grouped: true, Pending: 6, Count: 18, InUse: 16},
	}
	asked := map[string]time.Time{"asked": w, "asked-before": w.Add(-30 * 24 * time.Hour)}
	var got []string
	for _, b := range UnusedCapacityFirst(blocks, asked) {
		got = append(got, b.Name)
	}
	if len(got) != 2 || got[0] != "spare" || got[1] != "asked-before" {
		t.Errorf("maintained first: %v; want [spare asked-before]", got)
	}
}
