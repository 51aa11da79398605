package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// recorded is a receiver that keeps each request's headers and body.
type recorded struct {
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
}

func (r *recorded) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, body)
	r.heads = append(r.heads, req.Header.Clone())
}

// hostileSteps are a node's five steps and a group's, with a message that
// holds what would break a body written by hand: quotes, markup, a new
// line.
var hostileSteps = func() []fleet.Notification {
	var out []fleet.Notification
	for _, s := range fleet.Steps {
		out = append(out, fleet.Notification{Node: `gpu-7`, Pool: "a3-mega", Group: "slice-1", Step: s, Reason: "host-maintenance",
			When: time.Unix(1_800_000_000, 0).UTC(), Message: "gpu-7 said \"<!channel> & <https://evil.example|here>\"\nthen stopped"})
	}
	return append(out, fleet.Notification{Pool: "a3-mega", Group: "slice-1", Step: fleet.StepBack, When: time.Unix(1_800_000_000, 0).UTC(), Message: "slice-1 is back"})
}()

// receiverChecks are what each service's webhook requires of a body, as
// its documentation gives it (the file names the page); each returns what
// is wrong, or "".
var receiverChecks = map[string]func(x fleet.Notification, body map[string]any) string{
	"google-chat.tmpl": func(x fleet.Notification, b map[string]any) string {
		text, _ := b["text"].(string)
		if !strings.Contains(text, "*"+string(x.Step)+"*") || !strings.Contains(text, x.Message) {
			return "a text with the step in bold and the message"
		}
		return ""
	},
	"slack.tmpl": func(x fleet.Notification, b map[string]any) string {
		text, _ := b["text"].(string)
		blocks, _ := b["blocks"].([]any)
		if text == "" || len(blocks) == 0 || strings.ContainsAny(text, "<>") || !strings.Contains(text, "&lt;!channel&gt;") {
			return "a text and blocks, the node's markup escaped"
		}
		return ""
	},
	"teams.tmpl": func(x fleet.Notification, b map[string]any) string {
		atts, _ := b["attachments"].([]any)
		if b["type"] != "message" || len(atts) != 1 {
			return "a message with one attachment"
		}
		att, _ := atts[0].(map[string]any)
		card, _ := att["content"].(map[string]any)
		body, _ := card["body"].([]any)
		if att["contentType"] != "application/vnd.microsoft.card.adaptive" || card["type"] != "AdaptiveCard" || card["version"] == nil || len(body) == 0 {
			return "an Adaptive Card attachment with a body"
		}
		return ""
	},
	"pagerduty.tmpl": func(x fleet.Notification, b map[string]any) string {
		p, _ := b["payload"].(map[string]any)
		summary, _ := p["summary"].(string)
		dedup, _ := b["dedup_key"].(string)
		action := map[fleet.Step]string{fleet.StepBack: "resolve"}[x.Step]
		if action == "" {
			action = "trigger"
		}
		severity := map[fleet.Step]string{fleet.StepScheduled: "info", fleet.StepDraining: "warning", fleet.StepInMaintenance: "warning", fleet.StepBack: "info", fleet.StepFailed: "error"}[x.Step]
		_, tsErr := time.Parse(time.RFC3339, p["timestamp"].(string))
		switch {
		case b["routing_key"] == nil || b["event_action"] != action:
			return "a routing key and event_action " + action
		case dedup == "" || len(dedup) > 255:
			return "a dedup key of at most 255 characters"
		case summary == "" || len(summary) > 1024 || p["source"] == "" || p["severity"] != severity || tsErr != nil:
			return "a summary of at most 1024 characters, a source, severity " + severity + " and an RFC 3339 timestamp"
		}
		return ""
	},
}

// TestNotifyTemplatesReachTheirReceivers: each example template of
// examples/notifications, posted through the notifier to a receiver that
// records it, gives each step of a node and of a group a JSON body that
// the service's webhook takes (receiverChecks), with the headers of the
// headers file and the message as the node wrote it.
func TestNotifyTemplatesReachTheirReceivers(t *testing.T) {
	files, err := filepath.Glob("../examples/notifications/*.tmpl")
	if err != nil || len(files) != len(receiverChecks) {
		t.Fatalf("examples %v (%v), want one per receiver checked: %d", files, err, len(receiverChecks))
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			check := receiverChecks[name]
			if check == nil {
				t.Fatalf("no receiver checks %s", name)
			}
			tmpl := readExample(t, file)
			recv := &recorded{}
			srv := httptest.NewServer(recv)
			t.Cleanup(srv.Close)
			_, nt := testNotifier(t, clock.RealClock{}, srv.URL)
			nt.opts.Format, nt.opts.Template, nt.opts.Cluster = NotifyTemplate, tmpl, "prod"
			nt.opts.HeadersFile = filepath.Join(t.TempDir(), "headers")
			if err := os.WriteFile(nt.opts.HeadersFile, []byte("# the receiver's key\nAuthorization: Bearer s3cret\n\nX-Team: ml\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, x := range hostileSteps {
				nt.post(context.Background(), x)
			}
			if len(recv.bodies) != len(hostileSteps) {
				t.Fatalf("%d posts received, want %d", len(recv.bodies), len(hostileSteps))
			}
			for i, x := range hostileSteps {
				var body map[string]any
				if err := json.Unmarshal(recv.bodies[i], &body); err != nil {
					t.Fatalf("step %s: not JSON: %v\n%s", x.Step, err, recv.bodies[i])
				}
				if x.Node != "" {
					if wrong := check(x, body); wrong != "" {
						t.Errorf("step %s: want %s:\n%s", x.Step, wrong, recv.bodies[i])
					}
				}
				h := recv.heads[i]
				if h.Get("Content-Type") != "application/json" || h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Team") != "ml" {
					t.Errorf("step %s: headers %v, want JSON with the headers file's", x.Step, h)
				}
			}
		})
	}
}

// TestCloudEventsAreEvents: the cloudevents format posts a CloudEvents 1.0
// event in structured mode: its required attributes, the step as its
// type (versioned), the node as its subject, the step's own time as its
// time, the step's fields as its data, and the
// same id for the same step again (a retry), another for another step.
func TestCloudEventsAreEvents(t *testing.T) {
	recv := &recorded{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	_, nt := testNotifier(t, clock.RealClock{}, srv.URL)
	nt.opts.Format, nt.opts.Cluster = NotifyCloudEvents, "prod"
	for _, x := range []fleet.Notification{hostileSteps[1], hostileSteps[1], hostileSteps[3]} {
		nt.post(context.Background(), x)
	}
	var events []map[string]any
	for i, b := range recv.bodies {
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
		if ct := recv.heads[i].Get("Content-Type"); !strings.HasPrefix(ct, "application/cloudevents+json") {
			t.Errorf("Content-Type %q, want the structured mode's", ct)
		}
	}
	if len(events) != 3 {
		t.Fatalf("%d events, want 3", len(events))
	}
	e := events[0]
	data, _ := e["data"].(map[string]any)
	if e["specversion"] != "1.0" || e["type"] != "io.maintenance-handler.maintenance.draining.v1" || e["source"] != "maintenance-handler/prod" ||
		e["subject"] != "gpu-7" || e["datacontenttype"] != "application/json" || data["node"] != "gpu-7" || data["cluster"] != "prod" || data["message"] != hostileSteps[1].Message {
		t.Errorf("event %v", e)
	}
	if e["time"] != hostileSteps[1].When.Format(time.RFC3339) {
		t.Errorf("time %v; want the step's own, %s", e["time"], hostileSteps[1].When.Format(time.RFC3339))
	}
	if id := e["id"]; id == "" || events[1]["id"] != id || events[2]["id"] == id {
		t.Errorf("ids %v %v %v: want the same step's equal, another step's not", id, events[1]["id"], events[2]["id"])
	}
}

// TestNotifyTemplatesRefused: a template that does not parse, names a
// field a step has not, or makes a body that is not JSON is refused when
// it is read, saying why; a headers file that is not "Name: value" lines
// fails each post (counted failed), and nothing is sent.
func TestNotifyTemplatesRefused(t *testing.T) {
	for _, tc := range []struct{ text, says string }{
		{`{"text": {{ .Message | json }`, "unexpected"},
		{`{"text": {{ .Messages | json }}}`, "can't evaluate field Messages"},
		{`text: {{ .Message }}`, "not JSON"},
		{`{"text": "{{ .Message }}"}`, "not JSON"}, // unescaped: the sample's quotes break it
		{`{{ if .Digest }}{{ .Digest.Count }} steps{{ else }}{"text": {{ .Message | json }}}{{ end }}`, "sample digest is not JSON"},
		{`{"text": {{ .Message | json }}, "first": {{ (index .Digest.Notifications 0).Node | json }}}`, "sample step"},
	} {
		if _, err := ParseNotifyTemplate("t", tc.text); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ParseNotifyTemplate(%q): %v, want an error saying %q", tc.text, err, tc.says)
		}
	}

	recv := &recorded{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	a, nt := testNotifier(t, clock.RealClock{}, srv.URL)
	nt.opts.Retries = 0
	nt.opts.HeadersFile = filepath.Join(t.TempDir(), "headers")
	if err := os.WriteFile(nt.opts.HeadersFile, []byte("Authorization Bearer s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nt.post(context.Background(), hostileSteps[0])
	if len(recv.bodies) != 0 || testutil.ToFloat64(a.opts.Metrics.Notifications.WithLabelValues(string(fleet.StepScheduled), "failed")) != 1 {
		t.Errorf("%d posts received with a bad headers file, want none and one failed", len(recv.bodies))
	}
	if !slices.Contains(NotifyFormats, NotifyTemplate) || !slices.Contains(NotifyFormats, NotifyCloudEvents) {
		t.Errorf("formats %v", NotifyFormats)
	}
}

// TestCloudEventAttributes: a step's event names its cluster as a
// URI-reference (escaped as one path segment), carries a versioned type
// and the step's own time, whenever it is sent, and the same id for the
// same step; a digest's event is of the digest type, at its earliest
// step's time.
func TestCloudEventAttributes(t *testing.T) {
	when := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	draining := fleet.Notification{Node: "gpu-0", Pool: "a3", Step: fleet.StepDraining, Reason: "preemption", When: when.Add(30 * time.Second)}
	back := fleet.Notification{Group: "b1/s1", Pool: "a3", Step: fleet.StepBack, When: when}
	attrs := func(e map[string]any) map[string]any {
		delete(e, "data")
		delete(e, "id")
		return e
	}
	for _, tc := range []struct {
		name    string
		cluster string
		x       fleet.Notification
		want    map[string]any
	}{
		{"a node", "prod", draining, map[string]any{"specversion": "1.0", "type": "io.maintenance-handler.maintenance.draining.v1", "source": "maintenance-handler/prod",
			"time": "2026-12-01T03:00:30Z", "subject": "gpu-0", "datacontenttype": "application/json"}},
		{"a cluster name to escape", "prod west/1%?#", draining, map[string]any{"specversion": "1.0", "type": "io.maintenance-handler.maintenance.draining.v1",
			"source": "maintenance-handler/prod%20west%2F1%25%3F%23", "time": "2026-12-01T03:00:30Z", "subject": "gpu-0", "datacontenttype": "application/json"}},
		{"no cluster, a group", "", back, map[string]any{"specversion": "1.0", "type": "io.maintenance-handler.maintenance.back.v1", "source": "maintenance-handler",
			"time": "2026-12-01T03:00:00Z", "subject": "group/b1/s1", "datacontenttype": "application/json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := cloudEvent(NotifyFields{Cluster: tc.cluster, Notification: tc.x})
			if again := cloudEvent(NotifyFields{Cluster: tc.cluster, Notification: tc.x}); e["id"] == "" || again["id"] != e["id"] {
				t.Errorf("ids %v, %v: want one, the same for the same step", e["id"], again["id"])
			}
			if _, err := url.Parse(e["source"].(string)); err != nil {
				t.Errorf("source %v is no URI-reference: %v", e["source"], err)
			}
			if diff := cmp.Diff(tc.want, attrs(e)); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
		})
	}
	b := newBatch()
	b.add(draining)
	b.add(back)
	want := map[string]any{"specversion": "1.0", "type": "io.maintenance-handler.maintenance.digest.v1", "source": "maintenance-handler/prod%2F1",
		"time": "2026-12-01T03:00:00Z", "datacontenttype": "application/json"}
	if diff := cmp.Diff(want, attrs(digestEvent("prod/1", b, b.digest()))); diff != "" {
		t.Errorf("a digest's attributes (-want +got):\n%s", diff)
	}
}

// TestNotifyTemplatesTellADigest: each example template of
// examples/notifications makes of a digest (a window that held every
// hostile step, and a group's whose message is hostile) one JSON body that the service's webhook takes, with its
// count, what a node wrote escaped for Slack.
func TestNotifyTemplatesTellADigest(t *testing.T) {
	files, err := filepath.Glob("../examples/notifications/*.tmpl")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples %v (%v)", files, err)
	}
	b := newBatch()
	for _, x := range hostileSteps {
		b.add(x)
	}
	b.add(fleet.Notification{Pool: "a3-mega", Group: "slice-1", Step: fleet.StepDraining, When: hostileSteps[0].When, Message: hostileSteps[0].Message})
	checks := map[string]func(body map[string]any) bool{
		"google-chat.tmpl": func(body map[string]any) bool {
			text, _ := body["text"].(string)
			return strings.HasPrefix(text, "*digest* cluster prod: 7 steps:")
		},
		"slack.tmpl": func(body map[string]any) bool {
			blocks, _ := body["blocks"].([]any)
			text, _ := body["text"].(string)
			said := fmt.Sprint(blocks)
			return strings.HasPrefix(text, "digest prod: 7 steps:") && len(blocks) == 3 && !strings.ContainsAny(said, "<>") && strings.Contains(said, "&lt;!channel&gt;")
		},
		"teams.tmpl": func(body map[string]any) bool {
			raw, _ := json.Marshal(body)
			return body["type"] == "message" && strings.Contains(string(raw), `"digest: 7 steps"`) && strings.Contains(string(raw), `"title":"group slice-1"`)
		},
		"pagerduty.tmpl": func(body map[string]any) bool {
			p, _ := body["payload"].(map[string]any)
			summary, _ := p["summary"].(string)
			return body["event_action"] == "trigger" && p["severity"] == "error" && strings.HasPrefix(summary, "digest: 7 steps:") && body["dedup_key"] != ""
		},
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			_, nt := testNotifier(t, clock.RealClock{}, "http://127.0.0.1:1")
			nt.opts.Format, nt.opts.Template, nt.opts.Cluster = NotifyTemplate, readExample(t, file), "prod"
			body, _, raw := decodedBody(t, nt, b)
			if check := checks[name]; check == nil || !check(body) {
				t.Errorf("the digest's body is not what the receiver takes:\n%s", raw)
			}
		})
	}
}

// readExample is the example template in file, parsed.
func readExample(t *testing.T, file string) *template.Template {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := ParseNotifyTemplate(filepath.Base(file), string(text))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// decodedBody is what nt makes of b: decoded, its Content-Type, and as
// posted.
func decodedBody(t *testing.T, nt *notifier, b *batch) (map[string]any, string, []byte) {
	t.Helper()
	raw, contentType, err := nt.batchBody(b)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	return body, contentType, raw
}
