package metadata

// The watch's health: how long each key has gone without an answer, for the agent's health endpoint.

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// HealthListener hears a key's health change: KeyUnhealthy once when the
// key has had no good answer for UnhealthyAfter, KeyRecovered once at its
// next good answer. Between the two it hears nothing, so it is told at most
// twice per UnhealthyAfter per key however the server flaps.
type HealthListener interface {
	KeyUnhealthy(key string, cause error, since time.Duration)
	KeyRecovered(key string)
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
