package aggregator

// What the aggregator watches: the Nodes (each change marked for the next
// pass, counted, and told to the notifier), the policy ConfigMap and the
// cluster autoscaler's status; and the recorder of its Events.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/maintenance-handler/maintenance-handler/internal/policysource"
	"github.com/maintenance-handler/maintenance-handler/kube"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// record starts the Events' recorder, and returns what shuts it down.
func (a *Aggregator) record() (shutdown func()) {
	events := a.opts.EventClient
	if events == nil {
		events = a.opts.Client
	}
	a.recorder = kube.NewRecorder(events.EventSink(), corev1.EventSource{Component: protocol.EventSourceAggregator}, nil)
	return a.recorder.Shutdown
}

// relayAsk hands o to the Compute relay, while this replica leads: a new
// leader's relay reads every Node first.
func (a *Aggregator) relayAsk(o kube.Object) {
	if a.relay != nil && a.leading.Load() {
		a.relay.mark(o)
	}
}

// Healthy says why the replica is not healthy: a watch it needs (the
// Nodes, the claims) has failed for longer than bound. Nil while the
// watches start, and while they are healthy.
func (a *Aggregator) Healthy(bound time.Duration) error {
	w := a.watched.Load()
	if w == nil {
		return nil
	}
	var errs []error
	for _, i := range *w {
		if err := i.Unhealthy(bound); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watch starts the watches, which last until ctx ends, and waits for the
// node cache.
func (a *Aggregator) watch(ctx context.Context) error {
	a.nodes = kube.NewInformer(a.opts.Client.AllNodesListWatch(), kube.InformerOptions{Name: "nodes", Transform: slimNode, Logger: a.log.With("watch", "nodes")})
	a.nodes.AddHandlers(kube.Handlers{
		Add: func(o kube.Object) {
			a.podRanges(o, false)
			a.views.mark(o.GetName())
			a.nodeAdded(o)
			a.relayAsk(o)
			a.poke()
		},
		Update: func(old, cur kube.Object) {
			a.podRanges(cur, false)
			a.views.mark(cur.GetName())
			a.relayAsk(cur)
			a.observeNode(old, cur)
			a.notifyNode(old, cur)
			if o, ok := old.(*corev1.Node); !ok || decisiveUpdate(o, cur) {
				a.poke()
			}
		},
		Delete: func(o kube.Object) {
			a.podRanges(o, true)
			a.views.mark(o.GetName())
			a.nodeDeleted(o)
			a.notifyDeleted(o)
			a.poke()
		},
	})
	go a.nodes.Run(ctx)
	a.claimsCache = kube.NewInformer(claimsWatch(a.opts.Leases, a.opts.Namespace, ClaimsLeaseName(a.opts.LeaseName)),
		kube.InformerOptions{Name: "claims", Logger: a.log.With("watch", "claims")})
	go a.claimsCache.Run(ctx)
	watched := []*kube.Informer{a.nodes, a.claimsCache}
	if a.opts.AgentNamespace != "" {
		watched = append(watched, a.watchAgentShadows(ctx))
	}
	a.watched.Store(&watched)
	synced := make([]cache.InformerSynced, 0, len(watched))
	for _, inf := range watched {
		synced = append(synced, inf.HasSynced)
	}
	if a.opts.ConfigMap != "" {
		a.policy = policysource.NewSource(a.opts.Client.ConfigMapListWatch(a.opts.Namespace, a.opts.ConfigMap),
			a.opts.Namespace, a.opts.ConfigMap, a.log.With("watch", "policy"))
		a.policy.OnChange(a.poke)
		if err := a.policy.Start(ctx); err != nil {
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("sync node cache: %w", ctx.Err())
	}
	if ns, name, ok := strings.Cut(a.opts.AutoscalerStatus, "/"); ok {
		var err error
		if a.scaler, err = a.startAutoscalerSource(ctx, ns, name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.log.Warn("cannot read the cluster autoscaler's status: the pools it manages are not known, and are treated as not autoscaled (declare them with autoscaled: true in the policy ConfigMap)",
				"configmap", a.opts.AutoscalerStatus, "err", err)
		}
	}
	return nil
}

// podRanges tells Options.PodRanges of o's pod ranges (none once gone).
func (a *Aggregator) podRanges(o kube.Object, gone bool) {
	n, ok := o.(*corev1.Node)
	if a.opts.PodRanges == nil || !ok {
		return
	}
	if gone {
		a.opts.PodRanges(n.Name, nil)
		return
	}
	a.opts.PodRanges(n.Name, n.Spec.PodCIDRs)
}

// poke asks for a pass (at most one waits).
func (a *Aggregator) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}
