// Package monitoring ships what Prometheus and Grafana need to watch
// maintenance-handler: the recording rules and alerts (rules.yaml) and the
// Grafana dashboard (grafana/). The files are embedded so that tests and
// tools use exactly what is shipped. The same rules ship as Kubernetes
// objects in manifests/components (a PrometheusRule, and a Rules object
// for Google Cloud Managed Service for Prometheus); tests keep them equal.
package monitoring

import _ "embed"

// RulesFile is rules.yaml: recording rules and alerts for Prometheus.
//
//go:embed rules.yaml
var RulesFile []byte

// Dashboard is grafana/maintenance-handler.json, the Grafana dashboard.
//
//go:embed grafana/maintenance-handler.json
var Dashboard []byte
