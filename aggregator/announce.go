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
// announceRate and announceBurst pace the Events told: client-go's
// recorder queues at most 1,000 Events and drops the rest, and writes them
// at the Events client's rate (--kube-api-qps, 50 a second by default). A
// new leader's first pass over 65,000 nodes decides every one, so a pass
// tells what the pace allows, a pool larger than the pace's burst in
// parts, and what it left untold is told in a later pass (sooner than
// --interval): no Event is dropped, and each decision is told as it stands
// when its turn comes.
var (
	announceRate  rate.Limit = 40
	announceBurst            = 800
)

// announcePlans tells the plans of the pools not told yet, in order, as
// far as the pace allows (announceRate), and returns how many pools it
// left, wholly or partly untold, for a later pass and how long until the
// first of them may be told more.
func (a *Aggregator) announcePlans(plans []fleet.PoolPlan) (left int, wait time.Duration) {
	if a.pace == nil {
		a.pace = rate.NewLimiter(announceRate, announceBurst)
	}
	now := a.opts.Clock.Now()
	for _, p := range plans {
		if !a.unannounced[p.Pool] {
			continue
		}
		budget := 0
		if left == 0 {
			budget = max(0, int(a.pace.TokensAt(now)))
		}
		told, done := a.announce(p, budget)
		a.pace.AllowN(now, told)
		if done {
			delete(a.unannounced, p.Pool)
			continue
		}
		if left == 0 {
			r := a.pace.ReserveN(now, min(max(a.toTell(p), 1), announceBurst))
			wait = r.DelayFrom(now)
			r.CancelAt(now)
		}
		left++
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

// announce tells what changed of p against what was told of its pool,
// at most budget Events, and returns how many it told and whether it told
// all. What it leaves is told by a later call: a partly told plan is told
// again in full, against what was told of each node.
func (a *Aggregator) announce(p fleet.PoolPlan, budget int) (told int, done bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.Autoscaled != a.lastScaled[p.Pool] {
		a.lastScaled[p.Pool] = p.Autoscaled
		if p.Autoscaled {
			a.log.Info("the cluster autoscaler manages this pool: no opportunistic maintenance here unless the policy opts in (opportunisticWhenAutoscaled)", "pool", p.Pool)
		} else {
			a.log.Info("the cluster autoscaler no longer manages this pool", "pool", p.Pool)
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
	within := func() bool {
		if told == budget {
			return false
		}
		told++
		return true
	}
	done = a.announceConfigErr(said, p, within)
	switch telling(said, p) {
	case tellNothing:
		return told, done
	case tellChanged:
		for _, i := range p.Changed {
			done = a.tell(said, p.Decisions[i], within) && done
		}
		for _, name := range p.Dropped {
			delete(said.nodes, name)
		}
	case tellAll:
		a.announcements++
		for _, d := range p.Decisions {
			done = a.tell(said, d, within) && done
			if last := said.nodes[d.Node]; last != nil {
				last.plan = a.announcements
			}
		}
		for name, last := range said.nodes {
			if last.plan != a.announcements {
				delete(said.nodes, name)
			}
		}
	}
	said.plan = p.ID
	if !done {
		said.plan = 0 // told in full, against each node, next time
	}
	return told, done
}

// announceConfigErr tells each node of p its pool's configuration error
// once per error, each Event as within allows, and says whether every
// node was told.
func (a *Aggregator) announceConfigErr(said *poolTold, p fleet.PoolPlan, within func() bool) bool {
	errText := ""
	if p.ConfigErr != nil {
		errText = p.ConfigErr.Error()
	}
	if errText != said.errText {
		said.errText, said.errTold = errText, nil
		if errText != "" {
			a.log.Warn("invalid opportunistic configuration", "pool", p.Pool, "err", errText)
		}
	}
	if errText == "" || errText == a.lastPoolErr[p.Pool] {
		a.lastPoolErr[p.Pool] = errText
		return true
	}
	if said.errTold == nil {
		said.errTold = map[string]bool{}
	}
	for _, name := range p.ConfigNodes {
		if said.errTold[name] {
			continue
		}
		if !within() {
			return false
		}
		said.errTold[name] = true
		a.nodeEvent(name, "", true, protocol.EventInvalidConfig, fmt.Sprintf("No opportunistic maintenance for pool %s: %s", p.Pool, errText))
	}
	a.lastPoolErr[p.Pool], said.errTold = errText, nil
	return true
}

// tell tells d where it is not what said has of its node, as within
// allows, and says whether said now has d.
func (a *Aggregator) tell(said *poolTold, d fleet.Decision, within func() bool) bool {
	last := said.nodes[d.Node]
	if last != nil && last.reason == d.Reason {
		return true
	}
	if !within() {
		return false
	}
	if last == nil {
		last = &announced{}
		said.nodes[d.Node] = last
	}
	last.reason = d.Reason
	outcome, reason := "skipped", protocol.EventSkipped
	if d.Reason == fleet.ReasonTriggered {
		outcome, reason = "triggered", protocol.EventTriggered
	}
	a.opts.Metrics.Decisions.WithLabelValues(outcome, string(d.Reason)).Inc()
	a.nodeEvent(d.Node, d.UID, false, reason, d.Message())
	return true
}

// poolTold is a pool's decisions as announced: those of the plan of ID
// plan (0: of no plan a Fleet made), by node.
type poolTold struct {
	plan  uint64
	nodes map[string]*announced
	// errText is the pool's configuration error last seen, and errTold the
	// nodes told it while not all are.
	errText string
	errTold map[string]bool
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
	a.recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: name, UID: uid, APIVersion: "v1"}, typ, reason, a.markObserved(name, msg))
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
