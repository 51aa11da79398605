// Package maintenance is what Compute Engine's metadata server says about
// a VM's maintenance, parsed defensively: the values of maintenance-event,
// preempted and upcoming-maintenance (the notice), as docs/gce.md
// describes them. maintenance-event is NONE, MIGRATE_ON_HOST_MAINTENANCE,
// TERMINATE_ON_HOST_MAINTENANCE (or the older SHUTDOWN_ON_HOST_MAINTENANCE);
// preempted is TRUE or FALSE; the notice comes in snake_case or camelCase,
// can_reschedule as a bool or a string, times with Z or +00:00,
// start_time_window.earliest as a fallback, and the label-prefixed sample
// of the docs. A value the parser does not recognise is ErrUnrecognized:
// callers log and count it and never act on it.
//
// The agent mirrors the notice on its Node as served, so the same parser
// reads it back there (package protocol, the plugin).
//
// What it does not do: talk to the metadata server (package metadata
// does) or decide anything.
//
// Concurrency: pure functions over values; safe for concurrent use.
package maintenance
