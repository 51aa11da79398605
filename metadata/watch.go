package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/maintenance"
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
		return Answer{}, "", fmt.Errorf("get %s: status %d: %s", key, at.status, maintenance.Excerpt(at.body))
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
			w.checkHealth(key, started, fmt.Errorf("%w: %s answers %q", maintenance.ErrUnrecognized, key, maintenance.Excerpt(a.Value)))
		}
		if !changed {
			if err := w.sleepUntil(ctx, began.Add(w.timeout)); err != nil {
				return err
			}
		}
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
