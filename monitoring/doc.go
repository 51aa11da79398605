// Package monitoring ships what Prometheus and Grafana need to watch
// maintenance-handler: the recording rules and alerts (rules.yaml, and the
// same as a PrometheusRule in prometheusrule.yaml) and the Grafana
// dashboard (grafana/). The files are embedded
// so that tests and tools use exactly what is shipped.
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

// PrometheusRule is prometheusrule.yaml: the same groups as a
// prometheus-operator PrometheusRule.
//
//go:embed prometheusrule.yaml
var PrometheusRule []byte
