package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/maintenance-handler/maintenance-handler/backoff"
	"github.com/maintenance-handler/maintenance-handler/metadata"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// MetadataHealth tells of a watched metadata key's health changes: a
// Warning Event, a log line and the metric when a key turns unhealthy, a
// Normal Event when it recovers. The watcher calls it at most twice per
// --unhealthy-after per key, so the Events stay rare when the server flaps.
type MetadataHealth struct {
	Events  Events
	Metrics interface {
		SetMetadataKeyHealthy(key string, healthy bool)
	}
	Logger *slog.Logger
}

var _ metadata.HealthListener = (*MetadataHealth)(nil)

// Init marks every key healthy, so that the metric's series exist.
func (h *MetadataHealth) Init(keys []string) {
	for _, k := range keys {
		h.Metrics.SetMetadataKeyHealthy(k, true)
	}
}

// KeyUnhealthy implements metadata.HealthListener.
func (h *MetadataHealth) KeyUnhealthy(key string, cause error, since time.Duration) {
	h.Metrics.SetMetadataKeyHealthy(key, false)
	h.Logger.Warn("metadata key unhealthy", "key", key, "no_good_answer_for", since.Round(time.Second), "err", cause)
	h.Events.NodeEvent(true, protocol.EventMetadataUnhealthy, fmt.Sprintf(
		"The metadata server has given no usable answer for %s in %s (last error: %v). Until it does, the agent cannot see that signal change: it starts no drain on it and clears nothing; /healthz reports it.",
		key, since.Round(time.Second), cause))
}

// KeyRecovered implements metadata.HealthListener.
func (h *MetadataHealth) KeyRecovered(key string) {
	h.Metrics.SetMetadataKeyHealthy(key, true)
	h.Logger.Info("metadata key recovered", "key", key)
	h.Events.NodeEvent(false, protocol.EventMetadataRecovered, fmt.Sprintf("The metadata server answers %s again.", key))
}

// recordReconcile remembers whether the Node could be reconciled and
// returns how long to wait before trying again after a failure: 1 s doubled
// per consecutive failure up to 30 s, with up to half of it as jitter.
func (a *Agent) recordReconcile(err error) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.failures, a.failingSince, a.lastErr = 0, time.Time{}, nil
		return 0
	}
	if a.failures == 0 {
		a.failingSince = a.opts.Clock.Now()
	}
	a.failures++
	a.lastErr = err
	return backoff.Default.Delay(a.failures)
}

// watch is a watch the agent needs: its list or watch must not fail for
// long (kube.Informer).
type watch interface {
	Unhealthy(bound time.Duration) error
}

// needs adds w to the watches Healthy checks.
func (a *Agent) needs(w watch) {
	a.mu.Lock()
	a.watches = append(a.watches, w)
	a.mu.Unlock()
}

// unneed removes w from the watches Healthy checks (a slice the node
// left).
func (a *Agent) unneed(w watch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, v := range a.watches {
		if v == w {
			a.watches = append(a.watches[:i], a.watches[i+1:]...)
			return
		}
	}
}

// ErrUnhealthy is returned by Healthy.
var ErrUnhealthy = errors.New("agent unhealthy")

// Healthy reports an error when the agent has failed to reconcile its Node
// (for example, the API server is unreachable), or a watch it needs (its
// Node, its pods, its slice's Nodes) has failed, for longer than limit:
// it says which, and the last error.
func (a *Agent) Healthy(limit time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, w := range a.watches {
		if err := w.Unhealthy(limit); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrUnhealthy, err))
		}
	}
	if a.failures > 0 {
		if since := a.opts.Clock.Since(a.failingSince); since > limit {
			errs = append(errs, fmt.Errorf("%w: node %q not reconciled for %s (%d attempts): %v", ErrUnhealthy, a.opts.NodeName, since.Round(time.Second), a.failures, a.lastErr))
		}
	}
	return errors.Join(errs...)
}
