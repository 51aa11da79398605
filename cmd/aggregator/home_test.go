package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

// TestHomeOf: the cluster's project and regions are the flags', and what
// they leave out the metadata server's: the replica's own project and its
// zone's region.
func TestHomeOf(t *testing.T) {
	emu := gceemu.New(gceemu.Config{Project: "p7", Zone: "europe-west4-b"})
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emu.Close() })
	t.Setenv("GCE_METADATA_HOST", emu.Host())
	for _, tc := range []struct {
		name    string
		project string
		regions []string
		want    aggregator.Home
	}{
		{"the metadata server's", "", nil, aggregator.Home{Project: "p7", Regions: []string{"europe-west4"}}},
		{"the flags'", "p1", []string{"us-central1", "us-east5"}, aggregator.Home{Project: "p1", Regions: []string{"us-central1", "us-east5"}}},
		{"a project named, the region the metadata server's", "p1", nil, aggregator.Home{Project: "p1", Regions: []string{"europe-west4"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := homeOf(context.Background(), &Options{Project: tc.project, Regions: tc.regions}, slog.New(slog.DiscardHandler))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("home (-want +got):\n%s", d)
			}
		})
	}
}
