package aggregator

// What the aggregator tells people: an Event on each node whose decision
// changed (picked, or why not), on the policy's problems, and a log line
// once per kind of trouble; and the pools' figures for the metrics.

import (
	"time"

	"fmt"
	"iter"
	"strings"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/metrics"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// warnOnce logs msg with err when what's error text changes ("" msg and
// nil err: it is over).
func (a *Aggregator) warnOnce(what, msg string, err error) {
	text := ""
	if err != nil {
		text = err.Error()
	}
	a.mu.Lock()
	changed := a.lastWarn[what] != text
	a.lastWarn[what] = text
	a.mu.Unlock()
	if changed && err != nil {
		a.log.Warn(msg, "err", err)
	}
}

// poolStats is what the pool gauges show of plans.
func poolStats(plans []fleet.PoolPlan) []metrics.PoolStats {
	out := make([]metrics.PoolStats, 0, len(plans))
	for _, p := range plans {
		out = append(out, metrics.PoolStats{Pool: p.Pool, Pending: p.Pending, Idle: p.Idle, InMaintenance: p.InMaintenance,
			NextMaintenance: p.NextMaintenance, Configured: p.Configured, ConfigValid: p.ConfigErr == nil, Autoscaled: p.Autoscaled})
	}
	return out
}

// announce announces a pool's changed decisions and configuration errors.
// announceRate and announceBurst pace the decisions told as Events:
// client-go's recorder queues at most 1,000 Events and drops the rest, and
// writes them at the Events client's rate (--kube-api-qps, 50 a second by
// default). A new leader's first pass over 65,000 nodes decides every one,
// so a pool is told only while the pace allows its Events, and a pool left
// untold is told in a later pass (sooner than --interval): no decision's
// Event is dropped, and each is told as it stands when its turn comes.
var (
	announceRate  rate.Limit = 40
	announceBurst            = 800
)

// announcePlans tells the plans of the pools not told yet, as the pace
// allows (announceRate), and returns how many pools it left for a later
// pass and how long until the first of them may be told.
func (a *Aggregator) announcePlans(plans []fleet.PoolPlan) (left int, wait time.Duration) {
	if a.pace == nil {
		a.pace = rate.NewLimiter(announceRate, announceBurst)
	}
	now := a.opts.Clock.Now()
	for _, p := range plans {
		if !a.unannounced[p.Pool] {
			continue
		}
		n := min(a.toTell(p), announceBurst)
		if left > 0 || !a.pace.AllowN(now, n) {
			if left == 0 {
				r := a.pace.ReserveN(now, n)
				wait = r.DelayFrom(now)
				r.CancelAt(now)
			}
			left++
			continue
		}
		a.announce(p)
		delete(a.unannounced, p.Pool)
	}
	return left, wait
}

// toTell is how many Events announce would record for p, at most.
func (a *Aggregator) toTell(p fleet.PoolPlan) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	if p.ConfigErr != nil && p.ConfigErr.Error() != a.lastPoolErr[p.Pool] {
		n += len(p.ConfigNodes)
	}
	switch telling(a.lastReason[p.Pool], p) {
	case tellChanged:
		n += len(p.Changed)
	case tellAll:
		n += len(p.Decisions)
	}
	return n
}

// What announce tells of a pool's plan against what was told of it.
const (
	tellNothing = iota // the plan was told already
	tellChanged        // what changed since the plan told: a few decisions, not every one
	tellAll            // every decision, against what was told of each node
)

// telling is what announce tells of p, said being what was told of its
// pool (nil: nothing).
func telling(said *poolTold, p fleet.PoolPlan) int {
	switch {
	case said != nil && p.ID != 0 && said.plan == p.ID:
		return tellNothing
	case said != nil && p.Since != 0 && said.plan == p.Since:
		return tellChanged
	}
	return tellAll
}

func (a *Aggregator) announce(p fleet.PoolPlan) {
	a.mu.Lock()
	defer a.mu.Unlock()
	errText := ""
	if p.ConfigErr != nil {
		errText = p.ConfigErr.Error()
	}
	if p.Autoscaled != a.lastScaled[p.Pool] {
		a.lastScaled[p.Pool] = p.Autoscaled
		if p.Autoscaled {
			a.log.Info("the cluster autoscaler manages this pool: no opportunistic maintenance here unless the policy opts in (opportunisticWhenAutoscaled)", "pool", p.Pool)
		} else {
			a.log.Info("the cluster autoscaler no longer manages this pool", "pool", p.Pool)
		}
	}
	if errText != a.lastPoolErr[p.Pool] {
		a.lastPoolErr[p.Pool] = errText
		if errText != "" {
			a.log.Warn("invalid opportunistic configuration", "pool", p.Pool, "err", errText)
			for _, name := range p.ConfigNodes {
				a.nodeEvent(name, "", true, protocol.EventInvalidConfig, fmt.Sprintf("No opportunistic maintenance for pool %s: %s", p.Pool, errText))
			}
		}
	}
	// What the pool's last plan announced: a node's decision is told when
	// it changed, and one the plan no longer decides about is forgotten,
	// so that a decision that comes back is told again.
	said := a.lastReason[p.Pool]
	if said == nil {
		said = &poolTold{nodes: map[string]*announced{}}
		a.lastReason[p.Pool] = said
	}
	switch telling(said, p) {
	case tellNothing:
		return
	case tellChanged:
		for _, i := range p.Changed {
			a.tell(said, p.Decisions[i])
		}
		for _, name := range p.Dropped {
			delete(said.nodes, name)
		}
	case tellAll:
		a.announcements++
		for _, d := range p.Decisions {
			a.tell(said, d).plan = a.announcements
		}
		for name, last := range said.nodes {
			if last.plan != a.announcements {
				delete(said.nodes, name)
			}
		}
	}
	said.plan = p.ID
}

// tell tells d where it is not what said has of its node, and returns
// what said has of it now.
func (a *Aggregator) tell(said *poolTold, d fleet.Decision) *announced {
	last := said.nodes[d.Node]
	if last == nil {
		last = &announced{}
		said.nodes[d.Node] = last
	}
	if last.reason == d.Reason {
		return last
	}
	last.reason = d.Reason
	outcome, reason := "skipped", protocol.EventSkipped
	if d.Reason == fleet.ReasonTriggered {
		outcome, reason = "triggered", protocol.EventTriggered
	}
	a.opts.Metrics.Decisions.WithLabelValues(outcome, string(d.Reason)).Inc()
	a.nodeEvent(d.Node, d.UID, false, reason, d.Message())
	return last
}

// poolTold is a pool's decisions as announced: those of the plan of ID
// plan (0: of no plan a Fleet made), by node.
type poolTold struct {
	plan  uint64
	nodes map[string]*announced
}

// announced is a node's decision as a pool's plan announced it, and which
// announcement that was.
type announced struct {
	reason fleet.Reason
	plan   uint64
}

// markUnannounced has the plans made anew announced, and forgets what was
// announced of the pools gone (announce forgets, of a pool it announces,
// the nodes its plan no longer decides about: a node that moved to another
// pool is told its decision there).
func (a *Aggregator) markUnannounced(fresh, replaced []fleet.PoolPlan) {
	planned := make(map[string]bool, len(fresh))
	for _, p := range fresh {
		a.unannounced[p.Pool], planned[p.Pool] = true, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range replaced {
		if !planned[p.Pool] { // gone
			delete(a.lastReason, p.Pool)
			delete(a.unannounced, p.Pool)
		}
	}
}

func (a *Aggregator) nodeEvent(name string, uid types.UID, warning bool, reason, msg string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	a.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: name, UID: uid, APIVersion: "v1"}, typ, reason, msg)
}

// announceConfig reports a ConfigMap that cannot be read, once per change.
func (a *Aggregator) announceConfig(err error) {
	text := ""
	if err != nil {
		text = err.Error()
	}
	a.mu.Lock()
	changed := text != a.lastCfgErr
	a.lastCfgErr = text
	a.mu.Unlock()
	if !changed || err == nil {
		return
	}
	a.log.Warn("invalid configuration; no opportunistic maintenance at all until it is fixed", "configmap", a.opts.ConfigMap, "err", err)
	ref := &corev1.ObjectReference{Kind: "ConfigMap", Namespace: a.opts.Namespace, Name: a.opts.ConfigMap, APIVersion: "v1"}
	a.recorder.Event(ref, corev1.EventTypeWarning, protocol.EventInvalidConfig, "No opportunistic maintenance until this is fixed: "+text)
}

// announceUnreadable warns, once per change, of each node of views (those
// with unreadable values) whose agent wrote values this aggregator cannot
// read (they count as absent, and the node is
// not picked while they last), and exports them as a gauge per node.
func (a *Aggregator) announceUnreadable(views iter.Seq[*fleet.Node]) {
	counts := map[string]int{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for v := range views {
		counts[v.Name] = len(v.Unreadable)
		keys := strings.Join(v.Unreadable, ", ")
		if a.lastUnreadable[v.Name] == keys {
			continue
		}
		a.lastUnreadable[v.Name] = keys
		a.log.Warn("a node's agent wrote values this aggregator cannot read; they count as absent and the node is not picked", "node", v.Name, "keys", keys)
		a.nodeEvent(v.Name, v.UID, true, protocol.EventUnreadableState, fmt.Sprintf(
			"The aggregator cannot read %s on this node: each counts as absent, and the node is not picked for opportunistic maintenance while they last. Its agent is broken, compromised or of a version that writes what this one does not know.", keys))
	}
	for name := range a.lastUnreadable {
		if _, ok := counts[name]; !ok {
			delete(a.lastUnreadable, name)
		}
	}
	a.opts.Metrics.Unreadable.Set(counts)
}
