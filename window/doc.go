// Package window decides whether a moment is inside a maintenance window
// and outside every maintenance exclusion, as GKE's maintenance policy
// describes them: one recurring window (a start, an end or a duration, and
// an RFC 5545 RRULE, in UTC) and one-off exclusions (start, end). An
// exclusion wins over the window.
//
// Rules: FREQ=DAILY, WEEKLY or MONTHLY; INTERVAL; BYDAY (weekdays; with an
// ordinal such as 1SA or -1SU under MONTHLY); BYMONTHDAY (MONTHLY); UNTIL;
// COUNT; WKST. Anything else is an error naming the part, never a guess.
//
// What it does not do: read configuration (package aggregator does), or
// act. Everything here is a pure function of its inputs; values are safe
// for concurrent use.
package window
