package maintenance

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrUnrecognized marks a value the parser does not understand. Callers
// log and count it and never act on it (an unknown value is never
// "terminate").
var ErrUnrecognized = errors.New("unrecognized metadata value")

// Event is a value of instance/maintenance-event.
type Event string

const (
	EventNone      Event = "NONE"
	EventMigrate   Event = "MIGRATE_ON_HOST_MAINTENANCE"
	EventTerminate Event = "TERMINATE_ON_HOST_MAINTENANCE"
)

// unquote trims whitespace and one level of JSON string quoting (alt=json
// answers "NONE" for NONE).
func unquote(raw string) string {
	s := strings.TrimSpace(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return strings.TrimSpace(u)
		}
	}
	return s
}

// ParseEvent parses instance/maintenance-event. SHUTDOWN_ON_HOST_MAINTENANCE,
// the older spelling in Google's own sample, is read as terminate. Anything
// else is ErrUnrecognized.
func ParseEvent(raw string) (Event, error) {
	switch v := strings.ToUpper(unquote(raw)); v {
	case string(EventNone):
		return EventNone, nil
	case string(EventMigrate):
		return EventMigrate, nil
	case string(EventTerminate), "SHUTDOWN_ON_HOST_MAINTENANCE":
		return EventTerminate, nil
	}
	return "", fmt.Errorf("maintenance-event %q: %w", Excerpt(raw), ErrUnrecognized)
}

// ParsePreempted parses instance/preempted (TRUE or FALSE).
func ParsePreempted(raw string) (bool, error) {
	switch strings.ToUpper(unquote(raw)) {
	case "TRUE":
		return true, nil
	case "FALSE":
		return false, nil
	}
	return false, fmt.Errorf("preempted %q: %w", Excerpt(raw), ErrUnrecognized)
}

// Status is a notice's maintenance_status.
type Status string

const (
	StatusPending Status = "PENDING"
	StatusOngoing Status = "ONGOING"
	// StatusUnknown is the API's UNKNOWN, or a value this parser does not
	// know (kept in Notice.RawStatus).
	StatusUnknown Status = "UNKNOWN"
)

// Notice is a parsed instance/upcoming-maintenance notice.
type Notice struct {
	Type          string // SCHEDULED, UNSCHEDULED, ...
	Status        Status
	RawStatus     string // as served
	CanReschedule bool
	// WindowStart is when the maintenance may begin (window_start_time, or
	// start_time_window.earliest when that is missing).
	WindowStart time.Time
	// WindowEnd and LatestStart are zero when not served.
	WindowEnd   time.Time
	LatestStart time.Time
	Reasons     []string
	// Raw is the notice as served, compacted JSON.
	Raw string
}

// wireNotice accepts both the metadata server's snake_case and the REST
// API's camelCase spellings.
type wireNotice struct {
	CanReschedule        flexBool        `json:"can_reschedule"`
	CanRescheduleCamel   flexBool        `json:"canReschedule"`
	Type                 string          `json:"type"`
	Status               string          `json:"maintenance_status"`
	StatusCamel          string          `json:"maintenanceStatus"`
	WindowStart          string          `json:"window_start_time"`
	WindowStartCamel     string          `json:"windowStartTime"`
	WindowEnd            string          `json:"window_end_time"`
	WindowEndCamel       string          `json:"windowEndTime"`
	LatestStart          string          `json:"latest_window_start_time"`
	LatestStartCamel     string          `json:"latestWindowStartTime"`
	Reasons              []string        `json:"maintenance_reasons"`
	ReasonsCamel         []string        `json:"maintenanceReasons"`
	StartTimeWindow      *wireTimeWindow `json:"start_time_window"`
	StartTimeWindowCamel *wireTimeWindow `json:"startTimeWindow"`
}

type wireTimeWindow struct {
	Earliest string `json:"earliest"`
	Latest   string `json:"latest"`
}

// flexBool is a JSON bool that may also arrive as "true"/"TRUE"/"false".
type flexBool struct {
	set, v bool
}

func (b *flexBool) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case bool:
		*b = flexBool{true, x}
	case string:
		p, err := strconv.ParseBool(strings.ToLower(strings.TrimSpace(x)))
		if err != nil {
			return fmt.Errorf("can_reschedule %q is not a boolean", Excerpt(x))
		}
		*b = flexBool{true, p}
	case nil:
	default:
		return fmt.Errorf("can_reschedule %q is not a boolean", Excerpt(string(data)))
	}
	return nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// The years a notice's times may fall in.
const (
	minYear = 2000
	maxYear = 9999
)

func parseTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 time: %w", field, Excerpt(v), ErrUnrecognized)
	}
	// A time the Node's labels cannot carry (Unix seconds before 1970) or
	// that no maintenance has is not understood.
	if t.Year() < minYear || t.Year() > maxYear {
		return time.Time{}, fmt.Errorf("%s %q is not between the years %d and %d: %w", field, Excerpt(v), minYear, maxYear, ErrUnrecognized)
	}
	return t.UTC(), nil
}

// ParseNotice parses the body of instance/upcoming-maintenance (alt=json).
// present is false when the body says nothing is scheduled: empty, "{ }",
// NONE or "NONE". It tolerates the documented sample's label prefix
// ("Upcoming maintenance": {...}), camelCase keys, can_reschedule as a
// string, and times with Z or +00:00. A notice without a usable window
// start, or with a body that is not JSON, is ErrUnrecognized: the caller
// keeps what it knew and acts on nothing.
func ParseNotice(raw string) (n Notice, present bool, err error) {
	s := unquote(raw)
	if s == "" || strings.EqualFold(s, "NONE") {
		return Notice{}, false, nil
	}
	// The documented sample: "Upcoming maintenance": { ... }
	if s[0] == '"' {
		if i := strings.IndexByte(s, '{'); i > 0 && strings.Contains(s[:i], ":") {
			s = s[i:]
		}
	}
	// One decode in the common case, an object: the fleet's aggregator
	// reads every notice that changes.
	var w wireNotice
	body := strings.TrimLeft(s, " \t\r\n")
	if err := json.Unmarshal([]byte(s), &w); err != nil || !strings.HasPrefix(body, "{") {
		var fields map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &fields) != nil {
			return Notice{}, false, fmt.Errorf("upcoming-maintenance %q is not a JSON object: %w", Excerpt(raw), ErrUnrecognized)
		}
		if len(fields) == 0 {
			return Notice{}, false, nil // null
		}
		return Notice{}, false, fmt.Errorf("upcoming-maintenance %q: %v: %w", Excerpt(raw), err, ErrUnrecognized)
	}
	if strings.HasPrefix(strings.TrimLeft(body[1:], " \t\r\n"), "}") {
		return Notice{}, false, nil // { }: a valid object that starts so is empty
	}
	n.Type = w.Type
	n.RawStatus = first(w.Status, w.StatusCamel)
	switch Status(strings.ToUpper(n.RawStatus)) {
	case StatusPending:
		n.Status = StatusPending
	case StatusOngoing:
		n.Status = StatusOngoing
	default:
		n.Status = StatusUnknown
	}
	cr := w.CanReschedule
	if !cr.set {
		cr = w.CanRescheduleCamel
	}
	n.CanReschedule = cr.v
	n.Reasons = w.Reasons
	if n.Reasons == nil {
		n.Reasons = w.ReasonsCamel
	}
	start := first(w.WindowStart, w.WindowStartCamel)
	if start == "" {
		for _, tw := range []*wireTimeWindow{w.StartTimeWindow, w.StartTimeWindowCamel} {
			if tw != nil && tw.Earliest != "" {
				start = tw.Earliest
				break
			}
		}
	}
	if start == "" {
		return Notice{}, false, fmt.Errorf("upcoming-maintenance %q has no window start: %w", Excerpt(raw), ErrUnrecognized)
	}
	if n.WindowStart, err = parseTime("window_start_time", start); err != nil {
		return Notice{}, false, err
	}
	if n.WindowEnd, err = parseTime("window_end_time", first(w.WindowEnd, w.WindowEndCamel)); err != nil {
		return Notice{}, false, err
	}
	if n.LatestStart, err = parseTime("latest_window_start_time", first(w.LatestStart, w.LatestStartCamel)); err != nil {
		return Notice{}, false, err
	}
	compact, _ := json.Marshal(json.RawMessage(s))
	// The notice is mirrored on the Node, where an annotation holds valid
	// UTF-8 only: each byte that is not becomes U+FFFD, as the API
	// server's JSON makes it, and as the decoder made it in n's strings,
	// so that the mirror parses to the same notice.
	if n.Raw = string(compact); !utf8.ValidString(n.Raw) {
		n.Raw = string([]rune(n.Raw))
	}
	return n, true, nil
}

// Reschedulable reports whether the maintenance may be started now by
// performMaintenance: a PENDING notice that can be rescheduled.
func (n Notice) Reschedulable() bool {
	return n.Status == StatusPending && n.CanReschedule
}

// ExcerptMax is the most bytes of a value Excerpt keeps.
const ExcerptMax = 200

// Excerpt shortens a served value for logs and error messages: at most
// ExcerptMax bytes of it, cut between characters, then "...".
func Excerpt(s string) string {
	if len(s) <= ExcerptMax {
		return s
	}
	cut := ExcerptMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
