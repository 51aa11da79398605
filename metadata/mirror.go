package metadata

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KeyDeadline is the one key a Mirror serves that the metadata server
// does not: the time (RFC 3339) by which the node's agent asks its pods to
// be stopped, while a maintenance is under way (404 otherwise). It sits
// among the instance's attributes, where the metadata server serves the
// instance's own keys.
const KeyDeadline = "instance/attributes/maintenance-handler-deadline"

// MirrorPrefix is the path under which a Mirror serves its keys, as the
// metadata server does.
const MirrorPrefix = "/computeMetadata/v1/"

// MaxMirrorHang bounds a long poll on a Mirror: one without timeout_sec,
// or with a longer one, answers with the unchanged value after it, as the
// metadata server ends its own long polls.
const MaxMirrorHang = 5 * time.Minute

// Mirror serves, on the node, the maintenance keys as the agent last read
// them from the metadata server, with the metadata server's paths, its
// Metadata-Flavor header, its ETags and its wait_for_change contract: a
// pod whose own metadata server does not serve them (GKE's, under Workload
// Identity) reaches them at the node's address, with any client of the
// metadata server sent there (never through GCE_METADATA_HOST, which
// would send the pod's credential requests too). It serves those keys and
// KeyDeadline, and nothing else. Safe for concurrent use.
type Mirror struct {
	mu      sync.Mutex
	values  map[string]mirrored
	changed chan struct{} // closed and replaced on every change
}

type mirrored struct {
	answer Answer
	known  bool
}

// NewMirror serves keys (and KeyDeadline); each answers 503 until Set.
func NewMirror(keys ...string) *Mirror {
	m := &Mirror{values: map[string]mirrored{KeyDeadline: {answer: Answer{Absent: true}, known: true}}, changed: make(chan struct{})}
	for _, k := range keys {
		m.values[k] = mirrored{}
	}
	return m
}

// Set records key's latest answer; long polls on it whose value changes
// answer at once. A key the Mirror does not serve is ignored.
func (m *Mirror) Set(key string, a Answer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.values[key]
	if !ok || old.known && sameValue(old.answer, a) {
		return
	}
	m.values[key] = mirrored{answer: Answer{Value: a.Value, Absent: a.Absent, NotYet: a.NotYet}, known: true}
	close(m.changed)
	m.changed = make(chan struct{})
}

// SetDeadline serves t as KeyDeadline; zero removes it.
func (m *Mirror) SetDeadline(t time.Time) {
	a := Answer{Absent: true}
	if !t.IsZero() {
		a = Answer{Value: t.UTC().Format(time.RFC3339)}
	}
	m.Set(KeyDeadline, a)
}

// etag names a value as the metadata server's 16 hex digits do.
func etag(a Answer) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%t/%t/%s", a.Absent, a.NotYet, a.Value)
	return fmt.Sprintf("%016x", h.Sum64())
}

func (m *Mirror) get(key string) (mirrored, bool, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	return v, ok, m.changed
}

// ServeHTTP answers GET /computeMetadata/v1/<key> as the metadata server
// does, for the keys the Mirror serves.
func (m *Mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = fmt.Fprintln(w, msg)
	}
	switch {
	case r.Method != http.MethodGet:
		fail(http.StatusMethodNotAllowed, "Only GET is served.")
		return
	case r.Header.Get("Metadata-Flavor") != "Google" || r.Header.Get("X-Forwarded-For") != "":
		fail(http.StatusForbidden, "Missing Metadata-Flavor:Google header.")
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, MirrorPrefix)
	v, served, changed := m.get(key)
	if !ok || !served {
		fail(http.StatusNotFound, "Not found: this node serves only instance/maintenance-event, instance/upcoming-maintenance, instance/preempted and "+KeyDeadline+".")
		return
	}
	q := r.URL.Query()
	wait, hang, alt, err := mirrorQuery(q)
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if wait && v.known && (q.Get("last_etag") == "" || q.Get("last_etag") == etag(v.answer)) {
		timer := time.NewTimer(hang)
		defer timer.Stop()
	poll:
		for {
			select {
			case <-r.Context().Done():
				return
			case <-timer.C:
				break poll
			case <-changed:
				next, _, c := m.get(key)
				changed = c
				if etag(next.answer) != etag(v.answer) {
					v = next
					break poll
				}
			}
		}
	}
	switch a := v.answer; {
	case !v.known:
		fail(http.StatusServiceUnavailable, "The node's agent has not read this key from the metadata server yet; try again later.")
	case a.NotYet:
		w.Header().Set("ETag", etag(a))
		fail(http.StatusServiceUnavailable, "no notifications have been received yet, try again later")
	case a.Absent:
		w.Header().Set("ETag", etag(a))
		fail(http.StatusNotFound, "Not found.")
	default:
		w.Header().Set("ETag", etag(a))
		body := asAlt(a.Value, alt)
		w.Header().Set("Content-Type", "application/text")
		_, _ = w.Write([]byte(body))
	}
}

// asAlt is value as the metadata server serves it for alt: with alt=json
// a plain value is a JSON string ("NONE" as "\"NONE\""), without it a
// JSON string is its text. A value the agent read with alt=json (the
// notice) is already JSON, and is served as it came.
func asAlt(value, alt string) string {
	var text string
	isString := json.Unmarshal([]byte(value), &text) == nil
	switch {
	case alt == "json" && !json.Valid([]byte(value)):
		raw, _ := json.Marshal(value)
		return string(raw)
	case alt != "json" && isString:
		return text
	}
	return value
}

// mirrorQuery reads the query parameters the metadata server takes on a
// key: wait_for_change, last_etag, timeout_sec and alt; any other, or a
// value it does not take, is an error.
func mirrorQuery(q map[string][]string) (wait bool, hang time.Duration, alt string, err error) {
	hang = MaxMirrorHang
	for k, vs := range q {
		v := vs[0]
		switch k {
		case "wait_for_change":
			if wait, err = strconv.ParseBool(v); err != nil {
				return false, 0, "", fmt.Errorf("wait_for_change=%q: want true or false", v)
			}
		case "timeout_sec":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return false, 0, "", fmt.Errorf("timeout_sec=%q: want a whole number of seconds", v)
			}
			hang = MaxMirrorHang
			if n < int(MaxMirrorHang/time.Second) {
				hang = time.Duration(n) * time.Second
			}
		case "alt":
			if v != "text" && v != "json" {
				return false, 0, "", fmt.Errorf("alt=%q: want text or json", v)
			}
			alt = v
		case "last_etag":
		default:
			return false, 0, "", fmt.Errorf("unknown query parameter %q", k)
		}
	}
	return wait, hang, alt, nil
}
