package flagdoc

// The settings the binaries share: one name, one meaning.
var (
	Kubeconfig        = Doc{Names: []string{"kubeconfig"}, Default: "in-cluster", Text: "kubeconfig path, loaded as kubectl loads it (a token, token file, client certificate or credential plugin); empty: `$KUBECONFIG`, else the service account (its token file read again every minute, and at once after a 401)", Help: "Path to a kubeconfig; empty: $KUBECONFIG, else the service account."}
	LogLevel          = Doc{Names: []string{"log-level"}, Text: "debug, info, warn, error (JSON logs on stderr)", Help: "debug, info, warn or error."}
	PoolLabel         = Doc{Names: []string{"pool-label"}, Text: "the Node label naming a node's pool, for the policy (a multi-host TPU pool is a slice); the same for the agents, the aggregator and the plugin (the chart's `poolLabel`)", Help: "Node label naming a node's pool."}
	SliceLabel        = Doc{Names: []string{"slice-label"}, Text: "a Node label whose value names the node's multi-host slice, where nodes do not carry GKE's labels; empty: a TPU pool whose topology has more chips than one node is a slice. The same for the agents, the aggregator and the plugin (the chart's `sliceLabel`)", Help: "Node label naming a node's multi-host slice; empty: GKE's labels."}
	ReservationGroups = Doc{Names: []string{"reservation-groups"}, Text: "`subblock` or `block`: the nodes of one reservation sub-block or block (GKE's topology labels) are maintained as one group, as a slice is, the voluntary maintenance's one call at the group's scope (see [Reservation blocks and sub-blocks under grouped maintenance](aggregator.md#reservation-blocks-and-sub-blocks-under-grouped-maintenance)); the same for the agents, the aggregator and the plugin (the chart's `reservationGroups`)", Help: "Maintain reservation groups as one: none, subblock or block."}
)
