// Package policysource keeps the maintenance policy (package policy) of
// one ConfigMap by a watch of that ConfigMap alone, for the agent and the
// aggregator binaries: the runtime half of the policy, which package
// policy itself (pure) does not link.
//
// Concurrency: a Source's methods may be called from any goroutine once
// it runs.
package policysource

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/policy"
)

// Source is the policy in one ConfigMap, kept by one watch of that
// ConfigMap alone.
type Source struct {
	namespace, name string
	informer        *kube.Informer
	// mu guards parsed, the policy of the ConfigMap's last version read
	// (Config parses each version once).
	mu     sync.Mutex
	parsed struct {
		version string
		cfg     policy.Config
		err     error
	}
}

// NewSource returns a Source for the ConfigMap namespace/name, fed by lw,
// which lists and watches that ConfigMap alone (package kube's
// ConfigMapListWatch); a failed watch is logged to log. Call OnChange
// before Start.
func NewSource(lw kube.ListWatch, namespace, name string, log *slog.Logger) *Source {
	return &Source{namespace: namespace, name: name, informer: kube.NewInformer(lw, kube.InformerOptions{Name: "policy", Logger: log})}
}

// OnChange calls f after every change of the ConfigMap; f must not block.
func (s *Source) OnChange(f func()) {
	s.informer.AddHandlers(kube.OnAnyChange(f))
}

// Run runs the watch until ctx ends, without waiting for it (see Synced).
func (s *Source) Run(ctx context.Context) { go s.informer.Run(ctx) }

// Start runs the watch until ctx ends and returns once it has synced.
func (s *Source) Start(ctx context.Context) error {
	if err := s.informer.Start(ctx); err != nil {
		return fmt.Errorf("watch ConfigMap %s/%s: %w", s.namespace, s.name, err)
	}
	return nil
}

// Synced reports whether the ConfigMap has been read at least once.
func (s *Source) Synced() bool { return s.informer.HasSynced() }

// Name is namespace/name.
func (s *Source) Name() string { return s.namespace + "/" + s.name }

// absent is the Version of the empty policy of a ConfigMap that does not
// exist.
const absent = "absent"

// Config is the policy now: empty when the ConfigMap does not exist, an
// error when it cannot be parsed. Each version of the ConfigMap is parsed
// once, and the policy carries it as its Version.
func (s *Source) Config() (policy.Config, error) {
	obj, _ := s.informer.Get(s.namespace + "/" + s.name)
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return policy.Config{Version: absent}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parsed.version != cm.ResourceVersion || cm.ResourceVersion == "" {
		cfg, err := policy.ParseConfig(cm.Data[policy.ConfigKey])
		cfg.Version = cm.ResourceVersion
		s.parsed.version, s.parsed.cfg, s.parsed.err = cm.ResourceVersion, cfg, err
	}
	return s.parsed.cfg, s.parsed.err
}

// ManualGate is the agent's question: why a manual trigger on node is
// refused now ("" when it is not). While the ConfigMap has not been read,
// or cannot be parsed, every manual trigger is refused (reason
// "policy_unknown"): a policy that may gate them is not guessed at.
func (s *Source) ManualGate(poolLabel string) func(*corev1.Node, time.Time) (string, string) {
	return func(n *corev1.Node, now time.Time) (string, string) {
		if !s.Synced() {
			return policy.ReasonPolicyUnknown, fmt.Sprintf("the maintenance policy (ConfigMap %s) has not been read yet", s.Name())
		}
		cfg, err := s.Config()
		return policy.ManualGateOf(cfg, err, "ConfigMap "+s.Name(), n.Labels[poolLabel], now)
	}
}

// ObserveOnly is the agent's question: whether node is observed only, as
// the policy says for its pool (policy.Config.ObserveOnly, read even from
// a policy otherwise invalid); undecided until the ConfigMap is read.
func (s *Source) ObserveOnly(poolLabel string) func(*corev1.Node) (on, decided bool) {
	return func(n *corev1.Node) (bool, bool) {
		if !s.Synced() {
			return true, false
		}
		cfg, _ := s.Config()
		return cfg.ObserveOnly(n.Labels[poolLabel]), true
	}
}
