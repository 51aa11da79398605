package aggregator

// The notifications' bodies: the step's fields as JSON, Slack's incoming
// webhook, a CloudEvents 1.0 event in structured mode, or a Go template
// the operator writes for any other receiver (Google Chat, Microsoft
// Teams, PagerDuty: examples/notifications).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// The message formats.
const (
	NotifyJSON        = "json"
	NotifySlack       = "slack"
	NotifyCloudEvents = "cloudevents"
	NotifyTemplate    = "template"
)

// NotifyFormats are the formats, as --notify-format takes them.
var NotifyFormats = []string{NotifyJSON, NotifySlack, NotifyCloudEvents, NotifyTemplate}

// NotifyFields is what a template reads of a step: the cluster's name
// (--cluster-name) and the step's fields (fleet.Notification: .Node,
// .Pool, .Group, .Step, .Reason, .When, .Message).
type NotifyFields struct {
	Cluster string `json:"cluster,omitempty"`
	fleet.Notification
}

// notifyFuncs are the functions a template may call beside text/template's
// own: json (a value as JSON: a string quoted and escaped, so that what a
// node wrote cannot break the body), slack (Slack's escape of its three
// markup characters) and rfc3339 (a time).
var notifyFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"slack":   slackEscape,
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}

// sampleStep is the step a template is tried on when it is parsed.
var sampleStep = NotifyFields{Cluster: "cluster", Notification: fleet.Notification{Node: `gpu-"0"`, Pool: "a3", Group: "slice", Step: fleet.StepDraining,
	Reason: "host-maintenance", When: time.Unix(1_800_000_000, 0).UTC(), Message: "gpu-0 drains <now> & \"then\""}}

// ParseNotifyTemplate parses text as a notification template
// (text/template, with notifyFuncs) and tries it on a sample step: a
// template that fails there, or whose body is not JSON (every receiver it
// is for takes JSON), is refused with why.
func ParseNotifyTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(notifyFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("notification template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, sampleStep); err != nil {
		return nil, fmt.Errorf("notification template %s, on a sample step: %w", name, err)
	}
	if !json.Valid(b.Bytes()) {
		return nil, fmt.Errorf("notification template %s: its body for a sample step is not JSON: %.200s", name, b.String())
	}
	return t, nil
}

// body is x as the webhook takes it, and its Content-Type.
func (nt *notifier) body(x fleet.Notification) ([]byte, string, error) {
	f := NotifyFields{Cluster: nt.opts.Cluster, Notification: x}
	switch nt.opts.Format {
	case NotifySlack:
		b, err := json.Marshal(map[string]string{"text": slackEscape(fmt.Sprintf("*%s* %s: %s", x.Step, where(f), x.Message))})
		return b, "application/json", err
	case NotifyCloudEvents:
		b, err := json.Marshal(cloudEvent(f, nt.a.opts.Clock.Now()))
		return b, "application/cloudevents+json; charset=utf-8", err
	case NotifyTemplate:
		if nt.opts.Template == nil {
			return nil, "", errors.New("the template format without a template")
		}
		var b bytes.Buffer
		err := nt.opts.Template.Execute(&b, f)
		return b.Bytes(), "application/json", err
	}
	b, err := json.Marshal(f)
	return b, "application/json", err
}

// where names a step's node or group, its pool and its cluster.
func where(f NotifyFields) string {
	w := f.Node
	if w == "" {
		w = "group " + f.Group
	}
	if f.Pool != "" {
		w += " (pool " + f.Pool + ")"
	}
	if f.Cluster != "" {
		w = f.Cluster + ": " + w
	}
	return w
}

// cloudEvent is f as a CloudEvents 1.0 event (the specification's
// required attributes, and time (when it is told: the step's own time is
// the data's when), subject and the data's content type; its JSON format
// is the HTTP binding's structured mode). Its id is the
// same for the same step of the same node, so that a receiver drops a
// retry it already has.
func cloudEvent(f NotifyFields, now time.Time) map[string]any {
	subject := f.Node
	if subject == "" {
		subject = "group/" + f.Group
	}
	source := "maintenance-handler"
	if f.Cluster != "" {
		source += "/" + f.Cluster
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{f.Cluster, f.Node, f.Group, string(f.Step), f.Reason, f.When.UTC().Format(time.RFC3339Nano)}, "\x00")))
	return map[string]any{
		"specversion":     "1.0",
		"type":            "io.maintenance-handler.maintenance." + string(f.Step),
		"source":          source,
		"id":              hex.EncodeToString(sum[:16]),
		"time":            now.UTC().Format(time.RFC3339),
		"subject":         subject,
		"datacontenttype": "application/json",
		"data":            f,
	}
}
