package maintenance_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
	"github.com/maintenance-handler/maintenance-handler/test/gceemu"
)

// The fuzz targets' properties: what parses renders back to the same
// value (the canonical text, and the JSON string alt=json serves, parse to
// it again), and what is refused is ErrUnrecognized with a message short
// enough for a log line and an Event. make test runs the seeds; make fuzz
// searches further.

// maxError is the longest error message a value may produce.
const maxError = 1024

// checkRefusal fails t unless err is a clear refusal of raw.
func checkRefusal(t *testing.T, what, raw string, err error) {
	t.Helper()
	if !errors.Is(err, maintenance.ErrUnrecognized) {
		t.Errorf("%s(%q): %v, want ErrUnrecognized", what, raw, err)
	}
	if msg := err.Error(); len(msg) > maxError || !utf8.ValidString(msg) {
		t.Errorf("%s(%q): an error of %d bytes (valid UTF-8: %t), want at most %d", what, maintenance.Excerpt(raw), len(msg), utf8.ValidString(msg), maxError)
	}
}

// valueSeeds are what the metadata server serves for the three keys, in
// every form the emulator and the parser's tests know, and some that are
// not.
var valueSeeds = []string{
	"NONE", "NONE\n", `"NONE"`, "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE",
	"SHUTDOWN_ON_HOST_MAINTENANCE", `"TERMINATE_ON_HOST_MAINTENANCE"`, "TRUE", "FALSE", `"TRUE"`, "true\n",
	"", "PREEMPT", "garbage\x00", "{}", "{ }", "1", "yes", `"\u00e9"`, strings.Repeat("é", 150),
}

func FuzzParseEvent(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ev, err := maintenance.ParseEvent(raw)
		if err != nil {
			checkRefusal(t, "ParseEvent", raw, err)
			return
		}
		for _, form := range []string{string(ev), strconv.Quote(string(ev))} {
			if again, err := maintenance.ParseEvent(form); err != nil || again != ev {
				t.Errorf("ParseEvent(%q) = %q, but %q parses to %q, %v", raw, ev, form, again, err)
			}
		}
	})
}

func FuzzParsePreempted(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := maintenance.ParsePreempted(raw)
		if err != nil {
			checkRefusal(t, "ParsePreempted", raw, err)
			return
		}
		form := strings.ToUpper(strconv.FormatBool(p))
		if again, err := maintenance.ParsePreempted(form); err != nil || again != p {
			t.Errorf("ParsePreempted(%q) = %t, but %q parses to %t, %v", raw, p, form, again, err)
		}
	})
}

// noticeSeeds are upcoming-maintenance bodies: the emulator's, the
// documented sample's and the parser tests' forms.
func noticeSeeds() []string {
	start := time.Date(2026, 12, 1, 19, 0, 1, 0, time.UTC)
	emulated, _ := json.Marshal(gceemu.ScheduledNotice(start, 2*time.Hour))
	ongoing := gceemu.ScheduledNotice(start, 2*time.Hour)
	ongoing.MaintenanceStatus = gceemu.StatusOngoing
	ongoingJSON, _ := json.Marshal(ongoing)
	return []string{
		string(emulated), string(ongoingJSON), "{ }", "{}", "", "NONE", `"NONE"`, gceemu.NoUpcomingBody,
		`"Upcoming maintenance": {"can_reschedule": "true", "maintenance_status": "PENDING", "type": "SCHEDULED", "window_start_time": "2026-12-01T19:00:01+00:00"}`,
		`{"canReschedule":false,"maintenanceStatus":"ONGOING","type":"UNSCHEDULED","startTimeWindow":{"earliest":"2026-12-01T19:00:01Z","latest":"2026-12-01T20:00:01Z"}}`,
		`{"maintenance_status":"PENDING"}`, `{"window_start_time":"tomorrow"}`, `{"can_reschedule":7,"window_start_time":"2026-12-01T19:00:01Z"}`,
		`[1,2]`, `{"window_start_time":"2026-12-01T19:00:01.123456789Z","maintenance_reasons":null}`, "{\"type\":\"\xff\"}",
	}
}

func FuzzParseNotice(f *testing.F) {
	for _, s := range noticeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		n, present, err := maintenance.ParseNotice(raw)
		switch {
		case err != nil:
			checkRefusal(t, "ParseNotice", raw, err)
		case !present:
			if !cmp.Equal(n, maintenance.Notice{}) {
				t.Errorf("ParseNotice(%q): no notice, but %+v", raw, n)
			}
		default:
			if n.WindowStart.IsZero() || !json.Valid([]byte(n.Raw)) {
				t.Errorf("ParseNotice(%q): a notice with window start %v and raw %q", raw, n.WindowStart, n.Raw)
			}
			// The notice as the agent mirrors it (Raw, and Raw as a JSON
			// string) is the same notice.
			quoted, _ := json.Marshal(n.Raw)
			for _, form := range []string{n.Raw, string(quoted)} {
				again, present, err := maintenance.ParseNotice(form)
				if err != nil || !present || !cmp.Equal(again, n) {
					t.Errorf("ParseNotice(%q) = %+v, but its mirror %q parses to %+v, %t, %v", raw, n, form, again, present, err)
				}
			}
		}
	})
}

func FuzzExcerpt(f *testing.F) {
	for _, s := range valueSeeds {
		f.Add(s)
	}
	f.Add(strings.Repeat("a", maintenance.ExcerptMax-1) + "é")
	f.Fuzz(func(t *testing.T, s string) {
		e := maintenance.Excerpt(s)
		if len(e) > maintenance.ExcerptMax+len("...") || utf8.ValidString(s) && !utf8.ValidString(e) {
			t.Errorf("Excerpt(%q) = %q: %d bytes, valid UTF-8 %t", s, e, len(e), utf8.ValidString(e))
		}
		if len(s) <= maintenance.ExcerptMax && e != s || len(s) > maintenance.ExcerptMax && !strings.HasPrefix(s, strings.TrimSuffix(e, "...")) {
			t.Errorf("Excerpt(%q) = %q, not a prefix of it", s, e)
		}
	})
}
