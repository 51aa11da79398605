package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/maintenance-handler/maintenance-handler/aggregator"
	"github.com/maintenance-handler/maintenance-handler/compute"
	"github.com/maintenance-handler/maintenance-handler/metadata"
)

// homeTimeout bounds the metadata server's answer at start: off Compute
// Engine there is none, and the relay then calls on no VM.
const homeTimeout = 5 * time.Second

// homeOf is the project and the regions of the cluster's VMs: --project
// and --regions, and what they leave out from the metadata server of the
// VM the replica runs on (its project, its zone's region; on GKE with
// Workload Identity, the GKE metadata server's answer, which serves
// project/project-id and instance/zone as Compute Engine's does). The
// cluster's VMs are the aggregator's own project and region: the relay
// calls on no VM a Node's providerID places elsewhere.
func homeOf(ctx context.Context, opts *Options, logger *slog.Logger) aggregator.Home {
	home := aggregator.Home{Project: opts.Project, Regions: opts.Regions}
	if home.Project != "" && len(home.Regions) > 0 {
		return home
	}
	ctx, cancel := context.WithTimeout(ctx, homeTimeout)
	defer cancel()
	own, err := compute.InstanceFromMetadata(ctx, metadata.NewClient(homeTimeout, ""))
	if err != nil {
		logger.Warn("the project and region of the cluster's VMs are unknown (set --project and --regions): the Compute relay calls on no VM", "err", err)
		return home
	}
	if home.Project == "" {
		home.Project = own.Project
	}
	if len(home.Regions) == 0 {
		if r := aggregator.RegionOf(own.Zone); r != "" {
			home.Regions = []string{r}
		}
	}
	logger.Info("the Compute relay calls on the cluster's VMs only", "project", home.Project, "regions", home.Regions)
	return home
}
