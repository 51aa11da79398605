// Package metadata watches the GCE metadata server for the signals of host
// maintenance and preemption.
//
// It goes through the official cloud.google.com/go/compute/metadata client
// (URL, header, GCE_METADATA_HOST) with a thin layer on top: its own
// long-poll loop, because the client's Subscribe gives up when the first
// request fails (upcoming-maintenance may answer 503 until a notice exists),
// sleeps without watching its context, and never sends timeout_sec. Each
// poll sends wait_for_change=true, last_etag and timeout_sec; an
// http.RoundTripper reads the ETag from the answer and lets each call make
// one request, so that the client's own retries (five, on 5xx, 429 and
// network errors) cannot turn one hung request into minutes without an
// answer: the Watcher's backoff is the only retry policy. Requests for a key
// whose answer does not change are at least one poll timeout apart, whatever
// form the answer takes, so a server that does not long-poll a key is not
// asked in a loop.
//
// The values are parsed by package maintenance. "Nothing scheduled" is 200
// with { } or NONE, 404, or 503 with "no notifications have been received
// yet". Any other failure is unknown, never "cleared".
//
// What it does not do: decide anything. The agent turns parsed values into
// phases and actions.
//
// Concurrency: a Watcher may run several Watch loops at once (one per key);
// LastGood and Healthy may be called from any goroutine.
package metadata
