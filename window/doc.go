// Package window decides whether a moment is inside a maintenance window
// and outside every maintenance exclusion that blocks node maintenance, as
// GKE's maintenance policy describes them: one recurring window (a start,
// an end or a duration, and an RFC 5545 RRULE, in UTC) and one-off
// exclusions (start, end, and GKE's scope). An exclusion wins over the
// window.
//
// Rules: FREQ=DAILY, WEEKLY, MONTHLY or YEARLY; INTERVAL; BYDAY (with an
// ordinal such as 1SA or -1SU under MONTHLY or YEARLY); BYMONTHDAY;
// BYMONTH; BYYEARDAY; BYSETPOS; UNTIL; COUNT; WKST, each only with the
// FREQs RFC 5545 allows it with. Anything else is an error naming the
// part, never a guess.
//
// CheckLimits holds a policy to GKE's limits (exclusion counts, the length
// of a no_upgrades exclusion, 48 hours of maintenance time in any 32 days).
//
// What it does not do: read configuration (package aggregator does), or
// act. Everything here is a pure function of its inputs; values are safe
// for concurrent use.
package window
