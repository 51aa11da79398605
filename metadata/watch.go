package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
)

// Keys the agent watches, as suffixes of /computeMetadata/v1/.
const (
	KeyMaintenanceEvent    = "instance/maintenance-event"
	KeyPreempted           = "instance/preempted"
	KeyUpcomingMaintenance = "instance/upcoming-maintenance"
)

// noNotificationsMarker is part of the body the metadata server sends with a
// 503 on upcoming-maintenance when no notice has been received.
const noNotificationsMarker = "no notifications have been received"

// Results of one metadata request, for Recorder.
const (
	ResultOK          = "ok"           // 200 with a value
	ResultNotDefined  = "not_defined"  // 404: the key is not served here
	ResultNoNotice    = "no_notice"    // 503 "no notifications have been received yet"
	ResultServerError = "server_error" // any other non-200 status
	ResultTransport   = "transport_error"
	ResultUnparseable = "unparseable" // 200 with a value the parser rejects
)

// Recorder counts metadata requests by key and result. It is implemented by
// the metrics package.
type Recorder interface {
	MetadataRequest(key, result string)
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Client reaches the metadata server; nil builds one (see NewClient).
	Client *gcemetadata.Client
	// Timeout is the long poll's timeout_sec, and the least time between
	// two requests for a key whose answer does not change; zero means 60 s.
	Timeout time.Duration
	// Backoff spaces the retries of failed requests; zero is backoff.Default.
	// It is the only retry policy: each request is made once (see Watch).
	Backoff backoff.Policy
	// HangAfter is how long past Timeout a request may go unanswered
	// before it is given up as hung; zero means DefaultHangAfter.
	HangAfter time.Duration
	// UnhealthyAfter is how long a key may go without a good answer before
	// Health hears that it is unhealthy; zero means 3 × Timeout.
	UnhealthyAfter time.Duration
	// Health hears when a key turns unhealthy and when it recovers; nil
	// tells no one.
	Health   HealthListener
	Clock    clock.Clock
	Logger   *slog.Logger
	Recorder Recorder
}

// HealthListener hears a key's health change: KeyUnhealthy once when the
// key has had no good answer for UnhealthyAfter, KeyRecovered once at its
// next good answer. Between the two it hears nothing, so it is told at most
// twice per UnhealthyAfter per key however the server flaps.
type HealthListener interface {
	KeyUnhealthy(key string, cause error, since time.Duration)
	KeyRecovered(key string)
}

// Watcher long-polls metadata keys. It remembers when the server last gave
// a good answer, for the health endpoint.
type Watcher struct {
	client         *gcemetadata.Client
	timeout        time.Duration
	hangAfter      time.Duration
	backoff        backoff.Policy
	unhealthyAfter time.Duration
	health         HealthListener
	clock          clock.Clock
	log            *slog.Logger
	recorder       Recorder

	mu       sync.Mutex
	lastGood map[string]time.Time
	// unhealthy: the keys Health was last told are unhealthy.
	unhealthy map[string]bool
}

// NewClient returns a metadata client for long polls. Its HTTP client
// gives up on one request after the poll timeout plus 10 s (as Google's
// guest agent does), so a server that never answers cannot hold a poll
// forever, and each call makes exactly one request: the client's own
// retries (up to five, on 5xx, 429 and some network errors) would
// multiply a hang by six, and the Watcher retries with its own backoff.
// host, when set (host:port), sends every request there instead of the
// metadata server (or GCE_METADATA_HOST): one process can then watch
// several emulated VMs.
func NewClient(timeout time.Duration, host string) *gcemetadata.Client {
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	return gcemetadata.NewWithOptions(&gcemetadata.Options{Client: &http.Client{
		Timeout:   timeout + DefaultHangAfter,
		Transport: &onceTransport{next: http.DefaultTransport, host: host},
	}})
}

// DefaultHangAfter is WatcherOptions.HangAfter's default.
const DefaultHangAfter = 10 * time.Second

// NewWatcher returns a Watcher.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.HangAfter <= 0 {
		opts.HangAfter = DefaultHangAfter
	}
	if opts.UnhealthyAfter <= 0 {
		opts.UnhealthyAfter = 3 * opts.Timeout
	}
	if opts.Client == nil {
		opts.Client = NewClient(opts.Timeout, "")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Recorder == nil {
		opts.Recorder = nopRecorder{}
	}
	return &Watcher{
		client: opts.Client, timeout: opts.Timeout, hangAfter: opts.HangAfter, backoff: opts.Backoff,
		unhealthyAfter: opts.UnhealthyAfter, health: opts.Health,
		clock: opts.Clock, log: opts.Logger, recorder: opts.Recorder,
		lastGood: map[string]time.Time{}, unhealthy: map[string]bool{},
	}
}

type nopRecorder struct{}

func (nopRecorder) MetadataRequest(string, string) {}

// onceTransport lets each call of the official client make one request,
// and keeps what the server answered in the attempt carried by the
// request's context: the client returns only the body, and a long poll
// needs the ETag for last_etag. A second request within one call is the
// client retrying; it is refused with errRetryRefused, and the Watcher
// reads the first answer from the attempt.
type onceTransport struct {
	next http.RoundTripper
	host string // if set, replaces the request's host
}

type attemptKey struct{}

// attempt is the one request of one call.
type attempt struct {
	made   bool
	status int    // 0 when no answer came
	body   string // of a non-200 answer
	etag   string
	err    error // the transport's, when no answer came
}

// errRetryRefused ends the official client's own retries.
var errRetryRefused = errors.New("retry refused: the watcher retries with its own backoff")

// maxErrorBody bounds what is kept of a non-200 answer.
const maxErrorBody = 4 << 10

func (t *onceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	at, _ := req.Context().Value(attemptKey{}).(*attempt)
	if at != nil {
		if at.made {
			return nil, errRetryRefused
		}
		at.made = true
	}
	if t.host != "" {
		req = req.Clone(req.Context())
		req.URL.Host = t.host
		req.Host = t.host
	}
	resp, err := t.next.RoundTrip(req)
	if at == nil {
		return resp, err
	}
	if err != nil {
		at.err = err
		return nil, err
	}
	at.status, at.etag = resp.StatusCode, resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
		at.body = string(body)
		resp.Body = io.NopCloser(strings.NewReader(at.body))
	}
	return resp, nil
}

// Answer is one good answer for a key.
type Answer struct {
	// Value is the body of a 200 answer.
	Value string
	// Absent is true when the server says the key has no value: 404, or
	// 503 "no notifications have been received yet" on upcoming-maintenance.
	Absent bool
	// NotYet is set with Absent for the 503 "no notifications have been
	// received yet, try again later": the server has nothing to say yet,
	// which is weaker than "nothing is scheduled" (see Signals in package
	// agent for where that matters).
	NotYet bool
	// Since is the last moment this watcher knows the key held another
	// value: when the latest answer with another value arrived, or, for a
	// long poll on that value that the server held until the change, a
	// moment (answerDelay) before this answer came. The value appeared
	// after it. Zero when the watcher never saw another value (the first
	// answer since it started): when the value appeared is then unknown.
	Since time.Time
}

// A long poll the server held at least heldLongPoll before it answered
// with a changed value was answered for the change, at most answerDelay
// after it (the local metadata server answers within milliseconds).
const (
	heldLongPoll = 2 * time.Second
	answerDelay  = time.Second
)

// sameValue: a and b say the same (Since aside).
func sameValue(a, b Answer) bool {
	return a.Value == b.Value && a.Absent == b.Absent && a.NotYet == b.NotYet
}

// get fetches key once. With etag set it long-polls: the server answers
// when the value's ETag differs from etag, or after the timeout with the
// unchanged value. One request, bounded by the poll timeout plus 10 s.
func (w *Watcher) get(ctx context.Context, key, etag string) (Answer, string, error) {
	suffix := key
	params := url.Values{}
	if key == KeyUpcomingMaintenance {
		params.Set("alt", "json")
	}
	if etag != "" {
		params.Set("wait_for_change", "true")
		params.Set("last_etag", etag)
		params.Set("timeout_sec", fmt.Sprint(int(w.timeout/time.Second)))
	}
	if len(params) > 0 {
		suffix += "?" + params.Encode()
	}
	at := &attempt{}
	rctx, cancel := context.WithTimeout(context.WithValue(ctx, attemptKey{}, at), w.timeout+w.hangAfter)
	defer cancel()
	value, err := w.client.GetWithContext(rctx, suffix)
	switch {
	case err == nil:
		w.recorder.MetadataRequest(key, ResultOK)
		return Answer{Value: value}, at.etag, nil
	case at.status == http.StatusNotFound:
		w.recorder.MetadataRequest(key, ResultNotDefined)
		return Answer{Absent: true}, at.etag, nil
	case at.status == http.StatusServiceUnavailable && key == KeyUpcomingMaintenance && strings.Contains(at.body, noNotificationsMarker):
		w.recorder.MetadataRequest(key, ResultNoNotice)
		return Answer{Absent: true, NotYet: true}, at.etag, nil
	case at.status != 0:
		w.recorder.MetadataRequest(key, ResultServerError)
		return Answer{}, "", fmt.Errorf("get %s: status %d: %s", key, at.status, Excerpt(at.body))
	default:
		if ctx.Err() != nil {
			return Answer{}, "", ctx.Err()
		}
		w.recorder.MetadataRequest(key, ResultTransport)
		if at.err != nil {
			err = at.err
		}
		return Answer{}, "", fmt.Errorf("get %s: %w", key, err)
	}
}

// Handler receives each distinct answer for a key, in order. It returns
// false when it could not understand the answer (an unrecognized value):
// the watcher then counts it as unparseable and does not mark the key
// healthy for it.
type Handler func(ctx context.Context, a Answer) bool

// Watch long-polls key until ctx ends and calls h with the first answer and
// then with every answer that differs from the previous one. It returns
// ctx's error.
//
// Pacing: an answer that did not change (a timed-out poll re-delivers the
// unchanged value) is not passed on, and the next request waits until one
// Timeout after the previous one began. A server that long-polls answers
// an unchanged value only after the Timeout, so this adds no wait there
// and a change is seen as soon as the server answers; a server that
// answers at once (404, the 503 body, an answer without an ETag, a server
// that ignores wait_for_change) is asked once per Timeout, not in a loop.
// A changed answer is followed by the next request at once.
//
// Failures: each request is made once (see NewClient); a failed one is
// retried after an exponential backoff with jitter, and Watch never gives
// up. Health hears when the key turns unhealthy and recovers.
func (w *Watcher) Watch(ctx context.Context, key string, h Handler) error {
	var (
		etag     string
		seen     *Answer // the last answer, understood or not
		last     *Answer // the last answer passed on and understood
		failures int
		// latest is the latest answer, arrived at latestAt, and since its
		// Since: unlike seen, errors do not forget them, for an answer
		// after a gap still appeared after latestAt.
		latest          *Answer
		latestAt, since time.Time
	)
	started := w.clock.Now()
	for {
		began := w.clock.Now()
		// A request that hangs past the key's health limit is told when
		// the limit passes, as /healthz tells it, not when it gives up.
		stopTimer := w.healthTimer(key, started)
		a, newETag, err := w.get(ctx, key, etag)
		stopTimer()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failures++
			delay := w.backoff.Delay(failures)
			w.log.Warn("metadata request failed", "key", key, "err", err, "failures", failures, "retry_in", delay)
			w.checkHealth(key, started, err)
			etag, seen = "", nil // start over with a plain GET: the server may have restarted
			if err := w.sleepUntil(ctx, w.clock.Now().Add(delay)); err != nil {
				return err
			}
			continue
		}
		failures = 0
		arrived := w.clock.Now()
		if latest != nil && !sameValue(*latest, a) {
			since = latestAt
			// A long poll on the old value that the server held answers
			// when the value changes: it changed about when the answer came.
			if changedAt := arrived.Add(-answerDelay); etag != "" && arrived.Sub(began) >= heldLongPoll && changedAt.After(since) {
				since = changedAt
			}
		}
		latest, latestAt = &a, arrived
		a.Since = since
		etag = newETag
		if etag == "" {
			// No ETag to wait on: any last_etag makes a long-polling
			// server answer at once, and pacing spaces the requests.
			etag = "0"
		}
		changed := seen == nil || !sameValue(*seen, a)
		seen = &a
		good := last != nil && sameValue(*last, a)
		if changed && !good {
			if good = h(ctx, a); good {
				last = &a
			} else {
				w.recorder.MetadataRequest(key, ResultUnparseable)
			}
		}
		if good {
			if w.markGood(key) && w.health != nil {
				w.health.KeyRecovered(key)
			}
		} else {
			w.checkHealth(key, started, fmt.Errorf("%w: %s answers %q", ErrUnrecognized, key, Excerpt(a.Value)))
		}
		if !changed {
			if err := w.sleepUntil(ctx, began.Add(w.timeout)); err != nil {
				return err
			}
		}
	}
}

// checkHealth tells Health once when key has had no good answer for
// UnhealthyAfter (counted from started when it never had one).
func (w *Watcher) checkHealth(key string, started time.Time, cause error) {
	w.mu.Lock()
	since := w.lastGood[key]
	if since.IsZero() {
		since = started
	}
	age := w.clock.Since(since)
	tell := !w.unhealthy[key] && age > w.unhealthyAfter
	if tell {
		w.unhealthy[key] = true
	}
	w.mu.Unlock()
	if tell && w.health != nil {
		w.health.KeyUnhealthy(key, cause, age)
	}
}

// healthTimer arms a check of key's health for the moment its limit
// passes, while a request is under way, and returns its stop.
func (w *Watcher) healthTimer(key string, started time.Time) (stop func()) {
	w.mu.Lock()
	since := w.lastGood[key]
	unhealthy := w.unhealthy[key]
	w.mu.Unlock()
	if unhealthy {
		return func() {}
	}
	if since.IsZero() {
		since = started
	}
	asked := w.clock.Now()
	due := since.Add(w.unhealthyAfter).Sub(asked) + time.Millisecond
	timer := w.clock.NewTimer(max(due, 0))
	done := make(chan struct{})
	go func() {
		select {
		case <-timer.C():
			w.checkHealth(key, started, fmt.Errorf("%w: a request for %s has had no answer since %s", ErrNoAnswer, key, asked.UTC().Format(time.RFC3339)))
		case <-done:
		}
	}()
	return func() {
		timer.Stop()
		close(done)
	}
}

// ErrNoAnswer: a request to the metadata server is still waiting.
var ErrNoAnswer = errors.New("no answer")

func (w *Watcher) sleepUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(w.clock.Now())
	if d <= 0 {
		return nil
	}
	return w.sleep(ctx, d)
}

func (w *Watcher) sleep(ctx context.Context, d time.Duration) error {
	return backoff.Wait(ctx, w.clock, d)
}

// markGood records a good answer for key and reports whether the key was
// unhealthy until now.
func (w *Watcher) markGood(key string) (recovered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastGood[key] = w.clock.Now()
	recovered = w.unhealthy[key]
	w.unhealthy[key] = false
	return recovered
}

// LastGood returns when key last got a good, understood answer (zero if
// never).
func (w *Watcher) LastGood(key string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastGood[key]
}

// ErrUnhealthy is returned by Healthy.
var ErrUnhealthy = errors.New("metadata watcher unhealthy")

// Healthy reports an error naming every key that has had no good answer for
// longer than limit. since is when watching began: a key that never
// answered counts from then.
func (w *Watcher) Healthy(keys []string, since time.Time, limit time.Duration) error {
	now := w.clock.Now()
	var stale []string
	for _, k := range keys {
		last := w.LastGood(k)
		if last.IsZero() {
			last = since
		}
		if age := now.Sub(last); age > limit {
			stale = append(stale, fmt.Sprintf("%s (no good answer for %s)", k, age.Round(time.Second)))
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(stale, ", "))
	}
	return nil
}
