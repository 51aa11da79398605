package aggregator

// Told where people look: where a webhook is configured (NotifyOptions),
// the leader posts one message per step of each node's maintenance
// (fleet.NodeSteps: scheduled, draining, in maintenance, back, failed), in
// the order the Node went through them, and of each group (a multi-host
// slice or a reservation group: down when its first host drains, back when
// its last host is: fleet.Groups), in a format of notifyformat.go: only
// the steps NotifyOptions.Steps names, and those held within a digest's
// window (NotifyOptions.Digest) as one message (notifydigest.go). One
// sender posts them one at a time, each retried with
// backoff on a network error, a 429 or a 5xx (at least as long as the
// receiver's Retry-After asks, up to 5 minutes), each attempt bounded by
// the timeout; the URL and any headers are read from their files (mounted
// Secrets) at each post, so that a rotated URL or key is used at once and
// never appears in a flag or a log.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// NotifyOptions configure the webhook notifier.
type NotifyOptions struct {
	// URLFile holds the webhook's URL (a mounted Secret's key).
	URLFile string
	// Format is one of NotifyFormats; Template is the template of
	// NotifyTemplate (ParseNotifyTemplate).
	Format   string
	Template *template.Template
	// HeadersFile, when set, holds more headers for each post, a
	// "Name: value" a line (a mounted Secret's key: an Authorization
	// header), read at each post as the URL is.
	HeadersFile string
	// Timeout bounds each attempt; Retries is how many attempts follow a
	// failed one.
	Timeout time.Duration
	Retries int
	// Cluster names the cluster in each message ("" for none).
	Cluster string
	// Steps are the steps told, of nodes and groups alike (empty: every
	// step, fleet.Steps); the others are not told, nor counted.
	Steps []fleet.Step
	// Digest is the window a first step held opens: the steps held within
	// it are sent as one message when it closes (the step alone if it was
	// one, else a Digest). 0: each step is sent at once, on its own.
	Digest time.Duration
}

// DefaultNotifyDigest is the digest's window unless one is set: 30 s, as
// Alertmanager's group_wait (its configuration's default, "How long to
// initially wait to send a notification for a group of alerts"): long
// enough that a zone's preemption (every node's notice within seconds)
// is a message a step, short enough that people hear of a drain within
// half a minute.
const DefaultNotifyDigest = 30 * time.Second

// MaxNotifyDigest bounds the window: a longer one would tell a GPU host
// maintenance (about 60 minutes' notice) after it is over.
const MaxNotifyDigest = time.Hour

// notifyQueue is how many messages wait at most; past it, a message is
// dropped (and counted).
const notifyQueue = 4096

// notifyPerHour is the most messages one node (or one group) is told in
// an hour: a maintenance has five steps, and a node whose state flaps, or
// whose agent lies, does not flood the people who read them. Past it, a
// message is dropped (counted rate_limited).
const notifyPerHour = 12

// notifier posts the leader's notifications.
type notifier struct {
	a      *Aggregator
	opts   NotifyOptions
	client *http.Client
	queue  chan fleet.Notification
	// mu guards groups, which follows the groups' hosts in maintenance
	// this term (the Node watch's handlers, and a new term's reset).
	mu     sync.Mutex
	groups fleet.Groups
	// told holds when each node (or group) was last told, within the
	// hour: notifyPerHour.
	told claimWindow
	// held is what the open digest window holds (nil: none is open): the
	// sender's, and a new term's reset drops it.
	held *batch
}

func newNotifier(a *Aggregator, opts NotifyOptions) *notifier {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	opts.Retries = max(opts.Retries, 0)
	// A redirect is not followed: the URL a Secret names is the only place
	// messages go (a 3xx is a final failure).
	client := &http.Client{Timeout: opts.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &notifier{a: a, opts: opts, client: client, queue: make(chan fleet.Notification, notifyQueue), groups: fleet.Groups{}, told: claimWindow{}}
}

// notifyNode tells the steps of a Node's change, while leading.
func (a *Aggregator) notifyNode(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if ok1 && ok2 {
		a.notifySteps(o, n, false)
	}
}

// notifyObserved tells the steps of an observed node's agent's decisions
// (its unmade writes, shown on the Node: old and cur), each marked
// observe-only.
func (a *Aggregator) notifyObserved(old, cur *corev1.Node) { a.notifySteps(old, cur, true) }

func (a *Aggregator) notifySteps(o, n *corev1.Node, observed bool) {
	if a.notifier == nil || !a.leading.Load() {
		return
	}
	nt := a.notifier
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for _, x := range fleet.NodeSteps(o, n, n.Labels[a.opts.PoolLabel], a.opts.grouping().Name(n), a.opts.Clock.Now()) {
		if observed {
			x.ObserveOnly, x.Message = true, "Observe-only: "+x.Message
		}
		nt.enqueue(x, "")
		for _, g := range nt.groups.Step(x) {
			nt.enqueue(g, x.Node)
		}
	}
}

// notifyDeleted tells the group of a deleted Node back if it was its last
// host in maintenance, while leading.
func (a *Aggregator) notifyDeleted(o any) {
	n, ok := o.(*corev1.Node)
	if a.notifier == nil || !a.leading.Load() || !ok {
		return
	}
	nt := a.notifier
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for _, g := range nt.groups.Gone(n.Name, a.opts.grouping().Name(n), n.Labels[a.opts.PoolLabel], a.opts.Clock.Now()) {
		nt.enqueue(g, n.Name)
	}
}

// reset begins a term: what the last term left queued is dropped
// (counted; it may be hours old, and another leader has told what
// happened meanwhile), and the groups' hosts in maintenance are forgotten
// (those seen then may have come back unseen).
func (nt *notifier) reset() {
	nt.mu.Lock()
	clear(nt.groups)
	clear(nt.told)
	held := nt.held
	nt.held = nil
	nt.mu.Unlock()
	dropped := 0
	if held != nil {
		for step, n := range held.steps {
			dropped += n
			nt.a.opts.Metrics.Notifications.WithLabelValues(string(step), "dropped").Add(float64(n))
		}
	}
	for {
		select {
		case x := <-nt.queue:
			dropped++
			nt.a.opts.Metrics.Notifications.WithLabelValues(string(x.Step), "dropped").Inc()
		default:
			if dropped > 0 {
				nt.a.log.Warn("notifications of the last term dropped", "count", dropped)
			}
			return
		}
	}
}

// enqueue queues x, or drops it (counted) when its node was told
// notifyPerHour messages in the last hour (a group's message, those its
// group was told by the steps of the host via), or too many wait; a step
// Steps does not name is not told. A group's messages are counted by the
// host whose step told them: a host that flaps, or whose agent lies, uses
// up its own share of its group's messages, never the others' hosts'.
// The caller holds mu.
func (nt *notifier) enqueue(x fleet.Notification, via string) {
	if len(nt.opts.Steps) > 0 && !slices.Contains(nt.opts.Steps, x.Step) {
		return
	}
	who := x.Node
	if who == "" {
		who = "group " + x.Group + " via " + via
	}
	if nt.told.admitUpTo(who, 1, notifyPerHour, nt.a.opts.Clock.Now()) == 0 {
		nt.a.opts.Metrics.Notifications.WithLabelValues(string(x.Step), "rate_limited").Inc()
		nt.a.log.Warn("notification dropped: its node was told too often in the last hour", "node", x.Node, "group", x.Group, "step", x.Step, "per_hour", notifyPerHour)
		return
	}
	select {
	case nt.queue <- x:
	default:
		nt.a.opts.Metrics.Notifications.WithLabelValues(string(x.Step), "dropped").Inc()
		nt.a.log.Warn("notification dropped: too many wait", "node", x.Node, "group", x.Group, "step", x.Step)
	}
}

// run posts the queued notifications one at a time until ctx ends: each
// at once, or, with a digest, what each window held when it closes.
func (nt *notifier) run(ctx context.Context) {
	var window clock.Timer
	var closed <-chan time.Time
	defer func() {
		if window != nil {
			window.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case x := <-nt.queue:
			if nt.opts.Digest <= 0 {
				nt.post(ctx, x)
			} else if nt.hold(x) {
				window = nt.a.opts.Clock.NewTimer(nt.opts.Digest)
				closed = window.C()
			}
		case <-closed:
			window, closed = nil, nil
			if b := nt.closeWindow(); b != nil {
				nt.postBatch(ctx, b)
			}
		}
	}
}

// post posts x alone.
func (nt *notifier) post(ctx context.Context, x fleet.Notification) { nt.postBatch(ctx, batchOf(x)) }

// postBatch posts what b holds (a step, or a digest), retrying: a network
// error, a 429 or a 5xx is tried again after a backoff, up to Retries more
// times; any other answer is final. Each step it holds is counted with
// the outcome.
func (nt *notifier) postBatch(ctx context.Context, b *batch) {
	outcome := "failed"
	defer func() {
		for step, n := range b.steps {
			nt.a.opts.Metrics.Notifications.WithLabelValues(string(step), outcome).Add(float64(n))
		}
	}()
	x, _ := b.single()
	body, contentType, err := nt.batchBody(b)
	if err != nil {
		nt.a.log.Warn("notification not delivered: its body could not be made", "node", x.Node, "step", x.Step, "count", b.count, "err", err)
		return
	}
	for attempt := 1; ; attempt++ {
		retry, after, err := nt.attempt(ctx, body, contentType)
		if err == nil {
			outcome = "sent"
			return
		}
		if !retry || attempt > nt.opts.Retries || ctx.Err() != nil {
			nt.a.log.Warn("notification not delivered", "node", x.Node, "step", x.Step, "count", b.count, "attempts", attempt, "err", err)
			return
		}
		if backoff.Wait(ctx, nt.a.opts.Clock, max(backoff.Default.Delay(attempt), after)) != nil {
			return
		}
	}
}

// maxRetryAfter bounds the wait a receiver's Retry-After asks for: the
// messages behind this one wait as long.
const maxRetryAfter = 5 * time.Minute

// attempt posts body once; retry says whether a failure may be tried
// again, after says how long the receiver asked to wait before it
// (Retry-After, on a 429 or a 503; 0 for none).
func (nt *notifier) attempt(ctx context.Context, body []byte, contentType string) (retry bool, after time.Duration, err error) {
	raw, err := os.ReadFile(nt.opts.URLFile)
	if err != nil {
		return true, 0, fmt.Errorf("read the webhook URL: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSpace(string(raw)), bytes.NewReader(body))
	if err != nil {
		return false, 0, fmt.Errorf("the webhook URL in %s is not a URL", nt.opts.URLFile)
	}
	if nt.opts.HeadersFile != "" {
		headers, err := readHeaders(nt.opts.HeadersFile)
		if err != nil {
			return true, 0, err
		}
		maps.Copy(req.Header, headers)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := nt.client.Do(req)
	if err != nil {
		return true, 0, fmt.Errorf("post: %w", redactURL(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return false, 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, retryAfter(resp.Header.Get("Retry-After"), nt.a.opts.Clock.Now()), fmt.Errorf("the webhook answered %d", resp.StatusCode)
	}
	return false, 0, fmt.Errorf("the webhook answered %d", resp.StatusCode)
}

// retryAfter is the wait a Retry-After header asks for (delay-seconds or
// an HTTP date, RFC 9110 section 10.2.3), at most maxRetryAfter; 0 for
// none or one it cannot read.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// redactURL is err without the URL it may carry (a webhook URL is a
// secret).
func redactURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return fmt.Errorf("%s: %w", uerr.Op, uerr.Err)
	}
	return err
}

// readHeaders reads a headers file: a "Name: value" a line, blank lines
// and lines starting with # skipped. Its values never reach a log.
func readHeaders(path string) (http.Header, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the webhook's headers: %w", err)
	}
	h := http.Header{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(strings.TrimSpace(name), " \t") {
			return nil, fmt.Errorf("the webhook's headers in %s, line %d: want Name: value", path, i+1)
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return h, nil
}

// slackEscape escapes the three characters Slack reads as markup (its
// "Formatting text for app surfaces", "Escaping text"): what a node wrote
// into a message can neither mention a channel nor link anywhere.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
