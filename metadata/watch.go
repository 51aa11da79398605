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
	// Timeout is the long poll's timeout_sec; zero means 60 s.
	Timeout time.Duration
	// Backoff spaces the retries of failed requests; zero is backoff.Default.
	Backoff  backoff.Policy
	Clock    clock.Clock
	Logger   *slog.Logger
	Recorder Recorder
}

// Watcher long-polls metadata keys. It remembers when the server last gave
// a good answer, for the health endpoint.
type Watcher struct {
	client   *gcemetadata.Client
	timeout  time.Duration
	backoff  backoff.Policy
	clock    clock.Clock
	log      *slog.Logger
	recorder Recorder

	mu       sync.Mutex
	lastGood map[string]time.Time
}

// NewClient returns a metadata client for long polls: its HTTP client
// timeout is the poll timeout plus 10 s (as Google's guest agent does), so a
// server that never answers cannot hold a poll forever. host, when set
// (host:port), sends every request there instead of the metadata server
// (or GCE_METADATA_HOST): one process can then watch several emulated VMs.
func NewClient(timeout time.Duration, host string) *gcemetadata.Client {
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	return gcemetadata.NewWithOptions(&gcemetadata.Options{Client: &http.Client{
		Timeout:   timeout + 10*time.Second,
		Transport: &etagTransport{next: http.DefaultTransport, host: host},
	}})
}

// NewWatcher returns a Watcher.
func NewWatcher(opts WatcherOptions) *Watcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
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
		client: opts.Client, timeout: opts.Timeout, backoff: opts.Backoff,
		clock: opts.Clock, log: opts.Logger, recorder: opts.Recorder,
		lastGood: map[string]time.Time{},
	}
}

type nopRecorder struct{}

func (nopRecorder) MetadataRequest(string, string) {}

// etagTransport copies the ETag of each answer into the etagBox carried by
// the request's context: the official client's GetWithContext returns only
// the body, and a long poll needs the ETag for last_etag.
type etagTransport struct {
	next http.RoundTripper
	host string // if set, replaces the request's host
}

type etagBoxKey struct{}

type etagBox struct{ etag string }

func (t *etagTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.host != "" {
		req = req.Clone(req.Context())
		req.URL.Host = t.host
		req.Host = t.host
	}
	resp, err := t.next.RoundTrip(req)
	if box, ok := req.Context().Value(etagBoxKey{}).(*etagBox); ok && resp != nil {
		box.etag = resp.Header.Get("ETag")
	}
	return resp, err
}

// Answer is one good answer for a key.
type Answer struct {
	// Value is the body of a 200 answer.
	Value string
	// Absent is true when the server says the key has no value: 404, or
	// 503 "no notifications have been received yet" on upcoming-maintenance.
	Absent bool
}

// get fetches key once. With etag set it long-polls: the server answers
// when the value's ETag differs from etag, or after the timeout with the
// unchanged value.
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
	box := &etagBox{}
	value, err := w.client.GetWithContext(context.WithValue(ctx, etagBoxKey{}, box), suffix)
	var notDefined gcemetadata.NotDefinedError
	var serverErr *gcemetadata.Error
	switch {
	case err == nil:
		w.recorder.MetadataRequest(key, ResultOK)
		return Answer{Value: value}, box.etag, nil
	case errors.As(err, &notDefined):
		w.recorder.MetadataRequest(key, ResultNotDefined)
		return Answer{Absent: true}, box.etag, nil
	case errors.As(err, &serverErr) && serverErr.Code == http.StatusServiceUnavailable &&
		key == KeyUpcomingMaintenance && strings.Contains(serverErr.Message, noNotificationsMarker):
		w.recorder.MetadataRequest(key, ResultNoNotice)
		return Answer{Absent: true}, box.etag, nil
	case errors.As(err, &serverErr):
		w.recorder.MetadataRequest(key, ResultServerError)
		return Answer{}, "", fmt.Errorf("get %s: status %d: %w", key, serverErr.Code, err)
	default:
		if ctx.Err() == nil {
			w.recorder.MetadataRequest(key, ResultTransport)
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
// then with every answer that differs from the previous one (a timed-out
// poll re-delivers the unchanged value; it is not passed on). Failed
// requests are retried after an exponential backoff with jitter; Watch
// never gives up. It returns ctx's error.
func (w *Watcher) Watch(ctx context.Context, key string, h Handler) error {
	var (
		etag     string
		last     *Answer
		failures int
	)
	for {
		a, newETag, err := w.get(ctx, key, etag)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failures++
			delay := w.backoff.Delay(failures)
			w.log.Warn("metadata request failed", "key", key, "err", err, "failures", failures, "retry_in", delay)
			etag = "" // start over with a plain GET: the server may have restarted
			if err := w.sleep(ctx, delay); err != nil {
				return err
			}
			continue
		}
		failures = 0
		etag = newETag
		if etag == "" {
			// A server that sends no ETag cannot be long-polled; a plain
			// GET loop would spin, so wait before the next one.
			etag = "0"
		}
		if last != nil && *last == a {
			w.markGood(key)
			continue
		}
		if !h(ctx, a) {
			w.recorder.MetadataRequest(key, ResultUnparseable)
			// Not understood: retry after a pause rather than long-poll
			// on a value we cannot use.
			if err := w.sleep(ctx, w.backoff.Delay(1)); err != nil {
				return err
			}
			etag = ""
			continue // last stays: the next good answer is compared with it
		}
		w.markGood(key)
		last = &a
	}
}

func (w *Watcher) sleep(ctx context.Context, d time.Duration) error {
	t := w.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

func (w *Watcher) markGood(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastGood[key] = w.clock.Now()
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
