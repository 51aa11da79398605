// Package policy reads the project's maintenance policy: a pool's
// opportunistic setting in gcloud's syntax
// (node-idle-time=600s,min-nodes=3,window=2419200s), and the ConfigMap's
// policy.yaml (per-pool settings, maintenance windows and exclusions, and
// whether they also gate manual triggers). It is pure: the watch of that
// ConfigMap is package internal/policysource.
//
// Parsing is strict and reports every problem at once; callers treat an
// invalid policy as "no opportunistic action" (fail safe).
//
// Concurrency: Config values are read-only once parsed.
package policy
