package metadata

// The official client under the watch: one request per call, the ETag read from the answer.

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
)

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
