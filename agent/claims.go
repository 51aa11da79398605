package agent

import (
	"context"
	"slices"
	"time"

	"github.com/maintenance-handler/maintenance-handler/lifecycle"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultAcceleratorDeviceClasses are the device classes of dynamic
// resource allocation (DRA) whose devices make a pod accelerator work:
// those NVIDIA's GPU driver publishes (whole GPUs and MIG slices) and
// Google's TPU driver's. A pod that holds such a device through a
// ResourceClaim keeps its node busy, as one requesting nvidia.com/gpu does.
var DefaultAcceleratorDeviceClasses = []string{"gpu.nvidia.com", "mig.nvidia.com", "tpu.google.com"}

// claimRetry is how long an unreadable claim counts as holding an
// accelerator before the agent reads it again.
const claimRetry = time.Minute

// claimHold is what the agent read of one ResourceClaim a pod on its node
// uses: whether it asks for a device of an accelerator class, or why it
// could not be read (err), which counts as holding one until it is read
// again: a node is never taken for idle on a claim the agent cannot see.
type claimHold struct {
	accelerator bool
	err         error
	at          time.Time
}

// claimsOf names the ResourceClaims p uses ("namespace/name"): its own,
// and those made for it from templates. made is false while a claim to be
// made from a template has not been made yet.
func claimsOf(p *corev1.Pod) (names []string, made bool) {
	made = true
	for _, c := range p.Spec.ResourceClaims {
		name := ""
		switch {
		case c.ResourceClaimName != nil:
			name = *c.ResourceClaimName
		default:
			for _, s := range p.Status.ResourceClaimStatuses {
				if s.Name == c.Name && s.ResourceClaimName != nil {
					name = *s.ResourceClaimName
				}
			}
		}
		if name == "" {
			made = false
			continue
		}
		names = append(names, p.Namespace+"/"+name)
	}
	return names, made
}

// readClaims reads each claim a running pod on the node uses that the
// agent has not read (or read with an error over claimRetry ago), and
// forgets those no pod uses. A claim's requests cannot change once it is
// made, so one read is enough. It is called by the loop goroutine, before
// a step.
func (a *Agent) readClaims(ctx context.Context, pods []*corev1.Pod) {
	used := map[string]bool{}
	now := a.opts.Clock.Now()
	for _, p := range pods {
		if !holdsDevices(p) {
			continue
		}
		names, _ := claimsOf(p)
		for _, key := range names {
			used[key] = true
			if h, ok := a.claims[key]; ok && (h.err == nil || now.Sub(h.at) < claimRetry) {
				continue
			}
			ns, name, _ := cutKey(key)
			c, err := a.opts.Client.GetResourceClaim(ctx, ns, name)
			switch {
			case apierrors.IsNotFound(err):
				a.claims[key] = claimHold{at: now} // gone: it holds nothing
			case err != nil:
				if h, ok := a.claims[key]; !ok || h.err == nil {
					a.log.Warn("cannot read a ResourceClaim a pod on the node uses; the node counts as busy until it can", "claim", key, "err", err)
				}
				a.claims[key] = claimHold{err: err, at: now}
			default:
				a.claims[key] = claimHold{accelerator: asksFor(c, a.opts.AcceleratorDeviceClasses), at: now}
			}
		}
	}
	for key := range a.claims {
		if !used[key] {
			delete(a.claims, key)
		}
	}
}

// holdsDevices: p may hold devices through claims (it runs, or may) that
// count for idleness (not a DaemonSet's or a mirror pod's).
func holdsDevices(p *corev1.Pod) bool {
	kind := lifecycle.KindOf(p)
	return len(p.Spec.ResourceClaims) > 0 && (kind == lifecycle.PodWorkload || kind == lifecycle.PodSystem)
}

// claimsAccelerator: p holds, or may hold, an accelerator through its
// claims: one asks for an accelerator class, cannot be read, or is still
// to be made from its template.
func (a *Agent) claimsAccelerator(p *corev1.Pod) bool {
	if !holdsDevices(p) {
		return false
	}
	names, made := claimsOf(p)
	if !made {
		return true
	}
	for _, key := range names {
		h, ok := a.claims[key]
		if !ok || h.err != nil || h.accelerator {
			return true
		}
	}
	return false
}

// asksFor: c asks for a device of one of classes (exactly, or as one of
// its first-available choices).
func asksFor(c *resourcev1.ResourceClaim, classes []string) bool {
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && slices.Contains(classes, r.Exactly.DeviceClassName) {
			return true
		}
		for _, s := range r.FirstAvailable {
			if slices.Contains(classes, s.DeviceClassName) {
				return true
			}
		}
	}
	return false
}

func cutKey(key string) (namespace, name string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
