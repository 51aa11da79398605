package maintenance

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseEvent(t *testing.T) {
	for raw, want := range map[string]Event{
		"NONE":                            EventNone,
		"NONE\n":                          EventNone,
		`"NONE"`:                          EventNone,
		"MIGRATE_ON_HOST_MAINTENANCE":     EventMigrate,
		"TERMINATE_ON_HOST_MAINTENANCE":   EventTerminate,
		"SHUTDOWN_ON_HOST_MAINTENANCE":    EventTerminate,
		`"TERMINATE_ON_HOST_MAINTENANCE"`: EventTerminate,
	} {
		got, err := ParseEvent(raw)
		if err != nil || got != want {
			t.Errorf("ParseEvent(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "PREEMPT", "TERMINATE", "garbage\x00", "{}", "TRUE"} {
		if got, err := ParseEvent(raw); !errors.Is(err, ErrUnrecognized) {
			t.Errorf("ParseEvent(%q) = %q, %v; want ErrUnrecognized", raw, got, err)
		}
	}
}

func TestParsePreempted(t *testing.T) {
	for raw, want := range map[string]bool{"TRUE": true, "FALSE": false, `"TRUE"`: true, "true\n": true} {
		got, err := ParsePreempted(raw)
		if err != nil || got != want {
			t.Errorf("ParsePreempted(%q) = %v, %v; want %v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"", "1", "yes", "NONE"} {
		if _, err := ParsePreempted(raw); !errors.Is(err, ErrUnrecognized) {
			t.Errorf("ParsePreempted(%q): err %v, want ErrUnrecognized", raw, err)
		}
	}
}

func date(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestParseNotice(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    Notice
		present bool
		wantErr bool
	}{
		{name: "empty object", raw: "{ }"},
		{name: "empty object compact", raw: "{}"},
		{name: "empty body", raw: ""},
		{name: "plain NONE", raw: "NONE"},
		{name: "JSON NONE", raw: `"NONE"`},
		{
			name: "emulator snake_case",
			raw:  `{"can_reschedule":true,"latest_window_start_time":"2026-12-01T19:00:01Z","maintenance_reasons":["PLANNED_UPDATE"],"maintenance_status":"PENDING","type":"SCHEDULED","window_end_time":"2026-12-01T21:00:01Z","window_start_time":"2026-12-01T19:00:01Z"}`,
			want: Notice{Type: "SCHEDULED", Status: StatusPending, RawStatus: "PENDING", CanReschedule: true,
				WindowStart: date("2026-12-01T19:00:01Z"), WindowEnd: date("2026-12-01T21:00:01Z"), LatestStart: date("2026-12-01T19:00:01Z"),
				Reasons: []string{"PLANNED_UPDATE"}},
			present: true,
		},
		{
			name: "documented sample with label prefix and string bool",
			raw: `"Upcoming maintenance": {
"can_reschedule": "true",
"latest_window_start_time": "2024-12-01T19:00:01Z",
"maintenance_reasons": [
"PLANNED_UPDATE",
"PLANNED_NETWORK_UPDATE"
],
"maintenance_status": "PENDING",
"type": "SCHEDULED",
"window_end_time": "2024-12-01T21:00:01Z",
"window_start_time": "2024-12-01T19:00:01Z"
}`,
			want: Notice{Type: "SCHEDULED", Status: StatusPending, RawStatus: "PENDING", CanReschedule: true,
				WindowStart: date("2024-12-01T19:00:01Z"), WindowEnd: date("2024-12-01T21:00:01Z"), LatestStart: date("2024-12-01T19:00:01Z"),
				Reasons: []string{"PLANNED_UPDATE", "PLANNED_NETWORK_UPDATE"}},
			present: true,
		},
		{
			name: "offset times and start_time_window",
			raw:  `{"can_reschedule": true, "latest_window_start_time": "2025-09-10T09:28:16+00:00", "maintenance_status": "PENDING", "start_time_window": {"earliest": "2025-09-10T09:28:15+00:00", "latest": "2025-09-10T13:28:15+00:00"}, "type": "SCHEDULED", "window_end_time": "2025-09-10T13:28:15+00:00", "window_start_time": "2025-09-10T09:28:15+00:00"}`,
			want: Notice{Type: "SCHEDULED", Status: StatusPending, RawStatus: "PENDING", CanReschedule: true,
				WindowStart: date("2025-09-10T09:28:15Z"), WindowEnd: date("2025-09-10T13:28:15Z"), LatestStart: date("2025-09-10T09:28:16Z")},
			present: true,
		},
		{
			name: "only start_time_window, unscheduled, ongoing",
			raw:  `{"maintenance_status":"ONGOING","type":"UNSCHEDULED","start_time_window":{"earliest":"2026-01-02T03:04:05+00:00","latest":"2026-01-02T05:04:05+00:00"}}`,
			want: Notice{Type: "UNSCHEDULED", Status: StatusOngoing, RawStatus: "ONGOING",
				WindowStart: date("2026-01-02T03:04:05Z")},
			present: true,
		},
		{
			name: "camelCase",
			raw:  `{"canReschedule":false,"maintenanceStatus":"PENDING","type":"SCHEDULED","windowStartTime":"2026-02-01T00:00:00Z","windowEndTime":"2026-02-01T04:00:00Z"}`,
			want: Notice{Type: "SCHEDULED", Status: StatusPending, RawStatus: "PENDING",
				WindowStart: date("2026-02-01T00:00:00Z"), WindowEnd: date("2026-02-01T04:00:00Z")},
			present: true,
		},
		{
			name:    "unknown status is kept, not guessed",
			raw:     `{"maintenance_status":"COMPLETE","type":"SCHEDULED","window_start_time":"2026-02-01T00:00:00Z"}`,
			want:    Notice{Type: "SCHEDULED", Status: StatusUnknown, RawStatus: "COMPLETE", WindowStart: date("2026-02-01T00:00:00Z")},
			present: true,
		},
		{name: "garbage", raw: "\x00\xff<html>garbage", wantErr: true},
		{name: "JSON array", raw: `["PENDING"]`, wantErr: true},
		{name: "no window start", raw: `{"maintenance_status":"PENDING","type":"SCHEDULED"}`, wantErr: true},
		{name: "a window start before 2000", raw: `{"maintenance_status":"PENDING","window_start_time":"1969-12-31T23:00:00Z"}`, wantErr: true},
		{name: "a window end in the year 0", raw: `{"window_start_time":"2026-12-01T19:00:01Z","window_end_time":"0000-01-01T00:00:00Z"}`, wantErr: true},
		{name: "bad time", raw: `{"maintenance_status":"PENDING","window_start_time":"tomorrow"}`, wantErr: true},
		{name: "bad bool", raw: `{"can_reschedule":"maybe","window_start_time":"2026-02-01T00:00:00Z"}`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, present, err := ParseNotice(tc.raw)
			if tc.wantErr {
				if !errors.Is(err, ErrUnrecognized) {
					t.Fatalf("err = %v, want ErrUnrecognized", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if present != tc.present {
				t.Fatalf("present = %v, want %v", present, tc.present)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Notice{}, "Raw")); d != "" {
				t.Errorf("notice (-want +got):\n%s", d)
			}
			if present && (got.Raw == "" || got.Raw[0] != '{') {
				t.Errorf("Raw = %q, want the compacted JSON object", got.Raw)
			}
		})
	}
}

func TestReschedulable(t *testing.T) {
	for _, tc := range []struct {
		n    Notice
		want bool
	}{
		{Notice{Status: StatusPending, CanReschedule: true}, true},
		{Notice{Status: StatusPending}, false},
		{Notice{Status: StatusOngoing, CanReschedule: true}, false},
		{Notice{Status: StatusUnknown, CanReschedule: true}, false},
	} {
		if got := tc.n.Reschedulable(); got != tc.want {
			t.Errorf("%+v.Reschedulable() = %v, want %v", tc.n, got, tc.want)
		}
	}
}
