package aggregator

// A digest: the steps held within one window (NotifyOptions.Digest), told
// as one message, so that a zone's preemption (thousands of nodes, each
// draining, in maintenance and back) is a handful of messages, not
// thousands. The window opens with the first step held and closes after
// Digest; what it held is told as the step alone if it was one, else as
// one digest (its counts by step, reason and pool, and the first
// digestListed steps, its groups' first). A digest's memory is bounded
// whatever it holds: counts, and the steps it lists.

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/maintenance-handler/maintenance-handler/fleet"
)

// digestListed is how many steps a digest lists at most; the rest are
// counted (Digest.Omitted).
const digestListed = 100

// slackNamed is how many steps a digest's text names at most.
const slackNamed = 20

// Digest is what one window held, told as one message: a template reads
// it as .Digest, the json format posts it beside the cluster's name.
type Digest struct {
	// Count is how many steps the window held.
	Count int `json:"count"`
	// Steps, Reasons and Pools count them by step, by reason and by pool
	// (a step with no reason, or of no pool, is not counted there).
	Steps   map[string]int `json:"steps"`
	Reasons map[string]int `json:"reasons,omitempty"`
	Pools   map[string]int `json:"pools,omitempty"`
	// Notifications are the first digestListed steps held, those of
	// groups (a slice or a reservation group down or back) first, then the
	// nodes' in the order they were held; Omitted counts the rest.
	Notifications []fleet.Notification `json:"notifications"`
	Omitted       int                  `json:"omitted"`
	// ObserveOnly counts the steps held that were decided, not taken (on
	// nodes observed only).
	ObserveOnly int `json:"observeOnly,omitempty"`
}

// batch is what a window holds: one step, or the makings of a digest.
type batch struct {
	count, observed int
	steps           map[fleet.Step]int
	reasons, pools  map[string]int
	// groups and nodes list the first digestListed steps held of each.
	groups, nodes []fleet.Notification
	// first is the earliest step's time; sum hashes every step held.
	first time.Time
	sum   hash.Hash
}

func newBatch() *batch {
	return &batch{steps: map[fleet.Step]int{}, reasons: map[string]int{}, pools: map[string]int{}, sum: sha256.New()}
}

// batchOf is a batch of x alone.
func batchOf(x fleet.Notification) *batch {
	b := newBatch()
	b.add(x)
	return b
}

// add holds x.
func (b *batch) add(x fleet.Notification) {
	if b.count == 0 || x.When.Before(b.first) {
		b.first = x.When
	}
	b.count++
	b.steps[x.Step]++
	if x.ObserveOnly {
		b.observed++
	}
	if x.Reason != "" {
		b.reasons[x.Reason]++
	}
	if x.Pool != "" {
		b.pools[x.Pool]++
	}
	b.sum.Write([]byte(notificationID("", x) + "\x00"))
	switch {
	case x.Node == "" && len(b.groups) < digestListed:
		b.groups = append(b.groups, x)
	case x.Node != "" && len(b.nodes) < digestListed:
		b.nodes = append(b.nodes, x)
	}
}

// single is the one step b holds, if it holds one.
func (b *batch) single() (fleet.Notification, bool) {
	if b.count != 1 {
		return fleet.Notification{}, false
	}
	return slices.Concat(b.groups, b.nodes)[0], true
}

// digest is what b held.
func (b *batch) digest() *Digest {
	listed := slices.Concat(b.groups, b.nodes)
	listed = listed[:min(len(listed), digestListed)]
	d := &Digest{Count: b.count, Steps: map[string]int{}, Notifications: listed, Omitted: b.count - len(listed), ObserveOnly: b.observed}
	for step, n := range b.steps {
		d.Steps[string(step)] = n
	}
	if len(b.reasons) > 0 {
		d.Reasons = maps.Clone(b.reasons)
	}
	if len(b.pools) > 0 {
		d.Pools = maps.Clone(b.pools)
	}
	return d
}

// id names b's steps: the same steps held again (a retry of the same
// window's post) have the same id.
func (b *batch) id() string {
	return hex.EncodeToString(b.sum.Sum(nil)[:16])
}

// summary is the digest's fields a template reads as a step's (.Step,
// .Reason and .Pool when every step held shares it, .When the earliest
// step's time) with its text as .Message, so that a template written for
// one step still says what a digest holds.
func (b *batch) summary(d *Digest) fleet.Notification {
	only := func(m map[string]int) string {
		if len(m) == 1 && slices.Collect(maps.Values(m))[0] == b.count {
			return slices.Collect(maps.Keys(m))[0]
		}
		return ""
	}
	return fleet.Notification{Step: fleet.Step(only(d.Steps)), Reason: only(b.reasons), Pool: only(b.pools), When: b.first.UTC(), Message: digestText(d)}
}

// hold adds x to the open window; true when x opened it.
func (nt *notifier) hold(x fleet.Notification) bool {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	opened := nt.held == nil
	if opened {
		nt.held = newBatch()
	}
	nt.held.add(x)
	return opened
}

// closeWindow ends the open window: it takes what waits in the queue
// (told within the window) and returns all the window held.
func (nt *notifier) closeWindow() *batch {
	for drained := false; !drained; {
		select {
		case x := <-nt.queue:
			nt.hold(x)
		default:
			drained = true
		}
	}
	nt.mu.Lock()
	defer nt.mu.Unlock()
	b := nt.held
	nt.held = nil
	return b
}

// digestText is d as text: its counts by step, reason and pool, and the
// first slackNamed steps it lists, groups first ("and 980 more"), said
// observe-only as a step's message is when its steps were decided, not
// taken.
func digestText(d *Digest) string {
	var steps []string
	for _, s := range fleet.Steps {
		if n := d.Steps[string(s)]; n > 0 {
			steps = append(steps, fmt.Sprintf("%s %d", s, n))
		}
	}
	var w strings.Builder
	switch {
	case d.ObserveOnly == d.Count:
		fmt.Fprintf(&w, "Observe-only: %d steps: ", d.Count)
	case d.ObserveOnly > 0:
		fmt.Fprintf(&w, "%d steps (%d observe-only): ", d.Count, d.ObserveOnly)
	default:
		fmt.Fprintf(&w, "%d steps: ", d.Count)
	}
	w.WriteString(strings.Join(steps, ", "))
	if len(d.Reasons) > 0 {
		fmt.Fprintf(&w, "; reasons: %s", counted(d.Reasons))
	}
	if len(d.Pools) > 0 {
		fmt.Fprintf(&w, "; pools: %s", counted(d.Pools))
	}
	named := d.Notifications[:min(len(d.Notifications), slackNamed)]
	var who []string
	for _, x := range named {
		if x.Node == "" {
			who = append(who, fmt.Sprintf("group %s %s", x.Group, x.Step))
		} else {
			who = append(who, fmt.Sprintf("%s %s", x.Node, x.Step))
		}
	}
	fmt.Fprintf(&w, ". %s", strings.Join(who, ", "))
	if more := d.Count - len(named); more > 0 {
		fmt.Fprintf(&w, " and %d more", more)
	}
	return w.String()
}

// counted is m as "a 3, b 1": the most first, then by name.
func counted(m map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
