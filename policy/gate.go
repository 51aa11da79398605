package policy

import (
	"fmt"
	"time"
)

// ConfigKey is the ConfigMap key holding the policy.
const ConfigKey = "policy.yaml"

// ManualGateOf says why a manual trigger on a node of pool is refused at
// now by the policy cfg, read from source (for the message), where err
// says it could not be parsed: every trigger while the policy or the
// pool's part of it is invalid (ReasonPolicyUnknown), otherwise what
// Config.ManualBlocked says. The agent and `kubectl gce-maintenance trigger`
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
