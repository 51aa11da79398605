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
	"net/url"
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
// .Pool, .Group, .Step, .Reason, .When, .Message). For a digest (several
// steps held within --notify-digest), Digest is set and ranged over
// (.Digest.Notifications, .Digest.Count, ...), and the step's fields
// summarise it: no node or group, .Message its text, .When its earliest
// step's time, .Step, .Reason and .Pool set only when every step held
// shares them.
type NotifyFields struct {
	Cluster string `json:"cluster,omitempty"`
	fleet.Notification
	Digest *Digest `json:"-"`
}

// digestBody is a digest as the json format posts it, and as a
// CloudEvent's data: the cluster's name beside the digest's fields.
type digestBody struct {
	Cluster string `json:"cluster,omitempty"`
	*Digest
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

// sampleDigest is the digest a template is tried on when it is parsed:
// the sample step, its group's, and one more node's.
var sampleDigest = func() NotifyFields {
	b := newBatch()
	b.add(sampleStep.Notification)
	b.add(fleet.Notification{Group: "slice", Pool: "a3", Step: fleet.StepDraining, Reason: "host-maintenance", When: sampleStep.When, Message: "The group slice <goes> down"})
	b.add(fleet.Notification{Node: "gpu-1", Pool: "a3", Step: fleet.StepBack, Reason: "preemption", When: sampleStep.When, Message: "gpu-1 is back"})
	d := b.digest()
	return NotifyFields{Cluster: sampleStep.Cluster, Notification: b.summary(d), Digest: d}
}()

// ParseNotifyTemplate parses text as a notification template
// (text/template, with notifyFuncs) and tries it on a sample step and a
// sample digest: a template that fails on either, or whose body is not
// JSON (every receiver it is for takes JSON), is refused with why.
func ParseNotifyTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(notifyFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("notification template %s: %w", name, err)
	}
	for _, sample := range []struct {
		what   string
		fields NotifyFields
	}{{"a sample step", sampleStep}, {"a sample digest", sampleDigest}} {
		var b bytes.Buffer
		if err := t.Execute(&b, sample.fields); err != nil {
			return nil, fmt.Errorf("notification template %s, on %s: %w", name, sample.what, err)
		}
		if !json.Valid(b.Bytes()) {
			return nil, fmt.Errorf("notification template %s: its body for %s is not JSON: %.200s", name, sample.what, b.String())
		}
	}
	return t, nil
}

// batchBody is what b held as the webhook takes it, and its
// Content-Type: the step alone as body makes it, or a digest.
func (nt *notifier) batchBody(b *batch) ([]byte, string, error) {
	if x, ok := b.single(); ok {
		return nt.body(x)
	}
	d := b.digest()
	switch nt.opts.Format {
	case NotifySlack:
		text := "*digest* " + digestText(d)
		if nt.opts.Cluster != "" {
			text = "*digest* " + nt.opts.Cluster + ": " + digestText(d)
		}
		body, err := json.Marshal(map[string]string{"text": slackEscape(text)})
		return body, "application/json", err
	case NotifyCloudEvents:
		body, err := json.Marshal(digestEvent(nt.opts.Cluster, b, d))
		return body, cloudEventsContentType, err
	case NotifyTemplate:
		if nt.opts.Template == nil {
			return nil, "", errors.New("the template format without a template")
		}
		var body bytes.Buffer
		err := nt.opts.Template.Execute(&body, NotifyFields{Cluster: nt.opts.Cluster, Notification: b.summary(d), Digest: d})
		return body.Bytes(), "application/json", err
	}
	body, err := json.Marshal(digestBody{Cluster: nt.opts.Cluster, Digest: d})
	return body, "application/json", err
}

// body is x as the webhook takes it, and its Content-Type.
func (nt *notifier) body(x fleet.Notification) ([]byte, string, error) {
	f := NotifyFields{Cluster: nt.opts.Cluster, Notification: x}
	switch nt.opts.Format {
	case NotifySlack:
		b, err := json.Marshal(map[string]string{"text": slackEscape(fmt.Sprintf("*%s* %s: %s", x.Step, where(f), x.Message))})
		return b, "application/json", err
	case NotifyCloudEvents:
		b, err := json.Marshal(cloudEvent(f))
		return b, cloudEventsContentType, err
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

// cloudEventsContentType is the CloudEvents HTTP binding's structured
// mode, its event in the JSON format.
const cloudEventsContentType = "application/cloudevents+json; charset=utf-8"

// cloudEventType is a step's CloudEvents type. The CloudEvents 1.0 core
// specification (section 3.1.1, REQUIRED attributes, "type") says a type
// SHOULD be prefixed with a reverse-DNS name, and gives a versioned type
// as its example (com.example.object.deleted.v2); its primer ("Versioning
// of CloudEvents") puts a version in the type. So a step's type is
// io.maintenance-handler.maintenance.STEP.v1, a digest's
// io.maintenance-handler.maintenance.digest.v1: v1 is the data's shape,
// bumped if a field changes meaning.
func cloudEventType(step string) string {
	return "io.maintenance-handler.maintenance." + step + ".v1"
}

// cloudEventSource is the events' source: the CloudEvents 1.0 core
// specification (3.1.1, "source") makes it a URI-reference (RFC 3986), so
// the cluster's name is escaped as a path segment (url.PathEscape): a name
// with a space, a slash or a "%" stays one segment of a valid reference.
func cloudEventSource(cluster string) string {
	if cluster == "" {
		return "maintenance-handler"
	}
	return "maintenance-handler/" + url.PathEscape(cluster)
}

// notificationID is the same for the same step of the same node (or
// group) in the same cluster: a receiver drops a retry it already has.
func notificationID(cluster string, x fleet.Notification) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{cluster, x.Node, x.Group, string(x.Step), x.Reason, x.When.UTC().Format(time.RFC3339Nano)}, "\x00")))
	return hex.EncodeToString(sum[:16])
}

// cloudEvent is f as a CloudEvents 1.0 event (the specification's
// required attributes, time, subject and the data's content type; its
// JSON format is the HTTP binding's structured mode). Its time is the
// step's own (fleet.Notification.When: the window's start, the drain's
// deadline, or when the step was seen), not when it is sent, so that a
// retry or a digest's wait does not move it; its id is notificationID.
func cloudEvent(f NotifyFields) map[string]any {
	subject := f.Node
	if subject == "" {
		subject = "group/" + f.Group
	}
	return map[string]any{
		"specversion":     "1.0",
		"type":            cloudEventType(string(f.Step)),
		"source":          cloudEventSource(f.Cluster),
		"id":              notificationID(f.Cluster, f.Notification),
		"time":            f.When.UTC().Format(time.RFC3339),
		"subject":         subject,
		"datacontenttype": "application/json",
		"data":            f,
	}
}

// digestEvent is a digest as one CloudEvents 1.0 event of the digest
// type: its data the digest (digestBody), its time the earliest step's,
// its id the same for the same steps held.
func digestEvent(cluster string, b *batch, d *Digest) map[string]any {
	return map[string]any{
		"specversion":     "1.0",
		"type":            cloudEventType("digest"),
		"source":          cloudEventSource(cluster),
		"id":              b.id(),
		"time":            b.first.UTC().Format(time.RFC3339),
		"datacontenttype": "application/json",
		"data":            digestBody{Cluster: cluster, Digest: d},
	}
}
