package policy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/kube"
)

// ConfigKey is the ConfigMap key holding the policy.
const ConfigKey = "policy.yaml"

// Source is the policy in one ConfigMap, kept by one watch of that
// ConfigMap alone.
type Source struct {
	namespace, name string
	informer        *kube.Informer
}

// NewSource returns a Source for the ConfigMap namespace/name, fed by lw,
// which lists and watches that ConfigMap alone (package kube's
// ConfigMapListWatch); a failed watch is logged to log. Call OnChange
// before Start.
func NewSource(lw kube.ListWatch, namespace, name string, log *slog.Logger) *Source {
	return &Source{namespace: namespace, name: name, informer: kube.NewInformer(lw, nil, log)}
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

// Config is the policy now: empty when the ConfigMap does not exist, an
// error when it cannot be parsed.
func (s *Source) Config() (Config, error) {
	obj, ok := s.informer.Get(s.namespace + "/" + s.name)
	if !ok {
		return Config{}, nil
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return Config{}, nil
	}
	return ParseConfig(cm.Data[ConfigKey])
}

// ManualGate is the agent's question: why a manual trigger on node is
// refused now ("" when it is not). While the ConfigMap has not been read,
// or cannot be parsed, every manual trigger is refused (reason
// "policy_unknown"): a policy that may gate them is not guessed at.
func (s *Source) ManualGate(poolLabel string) func(*corev1.Node, time.Time) (string, string) {
	return func(n *corev1.Node, now time.Time) (string, string) {
		if !s.Synced() {
			return ReasonPolicyUnknown, fmt.Sprintf("the maintenance policy (ConfigMap %s) has not been read yet", s.Name())
		}
		cfg, err := s.Config()
		return ManualGateOf(cfg, err, "ConfigMap "+s.Name(), n.Labels[poolLabel], now)
	}
}

// ManualGateOf says why a manual trigger on a node of pool is refused at
// now by the policy cfg, read from source (for the message), where err
// says it could not be parsed: every trigger while the policy or the
// pool's part of it is invalid (ReasonPolicyUnknown), otherwise what
// Config.ManualBlocked says. The agent and `kubectl maintenance trigger`
// both ask it.
func ManualGateOf(cfg Config, err error, source, pool string, now time.Time) (reason, detail string) {
	if err != nil {
		return ReasonPolicyUnknown, fmt.Sprintf("the maintenance policy (%s) is invalid: %v", source, err)
	}
	if err := cfg.PoolErrors[pool]; err != nil {
		return ReasonPolicyUnknown, fmt.Sprintf("the maintenance policy's part for pool %s (%s) is invalid: %v", pool, source, err)
	}
	return cfg.ManualBlocked(pool, now)
}

// ReasonPolicyUnknown: the policy could not be read.
const ReasonPolicyUnknown = "policy_unknown"
