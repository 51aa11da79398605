package aggregator

// Gangs (protocol.GroupGang): the aggregator reads the pod each node's
// agent names for each of its pod groups (protocol.AnnotationPodGroups),
// believes the node runs that group only where the pod is on that node and
// in that group, and puts the gang label (protocol.LabelGang) on the nodes
// of every gang (fleet.GangLabels). From then on a gang is maintained as a
// slice is: its nodes' agents follow each other by the label, and the
// aggregator's asks and counts (slices.go) cover it.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// gangRecheck is how long what a pod showed of a node's pod group is
// believed: pods come and go under the same name.
const gangRecheck = 10 * time.Minute

// podGroupClaim is one pod group a node's agent says the node runs.
type podGroupClaim struct {
	node  string
	claim protocol.PodGroupClaim
}

// podGroupCheck is what the pod a claim names showed: whether it is that
// group's pod on that node (why not, if not), and when it was read.
type podGroupCheck struct {
	ok  bool
	why string
	at  time.Time
}

// gangChecks are the claims the aggregator has read the pods of; the pass
// goroutine's.
type gangChecks map[podGroupClaim]podGroupCheck

// applyGangs reads the pods of the claims not read, or read gangRecheck
// ago, and writes every gang label that differs from what its node
// carries, conditional on the node as the pass saw it.
func (a *Aggregator) applyGangs(ctx context.Context, nodes *fleet.Fleet, decidedOn map[string]*corev1.Node) {
	looked := slices.Collect(nodes.Gangs())
	if len(looked) == 0 && len(a.gangs) == 0 {
		return
	}
	a.checkPodGroups(ctx, looked)
	want := fleet.GangLabels(slices.Values(looked), func(node string, c protocol.PodGroupClaim) (bool, bool) {
		ch, read := a.gangs[podGroupClaim{node, c}]
		return ch.ok, read
	})
	var names []string
	for _, n := range looked {
		if want[n.Name] != n.Gang {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	written := a.updateNodes(ctx, names, decidedOn, "gang label", func(name string, n *corev1.Node) {
		if want[name] == "" {
			delete(n.Labels, protocol.LabelGang)
			return
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[protocol.LabelGang] = want[name]
	})
	for i, name := range names {
		if !written[i] {
			continue
		}
		v := nodes.Node(name)
		if gang := want[name]; gang != "" {
			a.log.Info("node put in a gang", "node", name, "gang", gang)
			a.nodeEvent(name, v.UID, false, protocol.EventGangJoined, fmt.Sprintf(
				"The node runs pods of the pod group(s) %s with other nodes: it is maintained with them as the gang %s (label %s), as a multi-host slice's hosts are",
				groupsOf(v), gang, protocol.LabelGang))
			continue
		}
		a.log.Info("node no longer in a gang", "node", name, "gang", v.Gang)
		a.nodeEvent(name, v.UID, false, protocol.EventGangLeft, fmt.Sprintf("The node runs no pod of the gang %s with other nodes any more: it is maintained on its own", v.Gang))
	}
}

// checkPodGroups reads, up to inFlight at once, the pod of every claim of
// looked not read or read gangRecheck ago (a node lists at most
// protocol.MaxPodGroups: a longer list is unreadable, and reads none;
// announceUnreadable says so), forgets the claims gone, and
// says on the node (a Warning Event, and the log) when a claim is found
// untrue. A pod that cannot be read now is read again in the next pass.
func (a *Aggregator) checkPodGroups(ctx context.Context, looked []*fleet.Node) {
	now := a.opts.Clock.Now()
	if a.gangs == nil {
		a.gangs = gangChecks{}
	}
	seen := map[podGroupClaim]bool{}
	var todo []podGroupClaim
	for _, n := range looked {
		for _, c := range n.PodGroups {
			k := podGroupClaim{n.Name, c}
			seen[k] = true
			if ch, ok := a.gangs[k]; !ok || now.Sub(ch.at) >= gangRecheck {
				todo = append(todo, k)
			}
		}
	}
	for k := range a.gangs {
		if !seen[k] {
			delete(a.gangs, k)
		}
	}
	checks := make([]*podGroupCheck, len(todo))
	var g errgroup.Group
	g.SetLimit(inFlight)
	for i, k := range todo {
		g.Go(func() error {
			p, err := a.opts.Client.GetPod(ctx, k.claim.Namespace, k.claim.Pod)
			switch {
			case apierrors.IsNotFound(err):
				checks[i] = &podGroupCheck{why: "there is no such pod", at: now}
			case err != nil:
				a.log.Warn("a pod a node names for its pod group not read; reading it again in the next pass", "node", k.node, "pod", k.claim.Namespace+"/"+k.claim.Pod, "err", err)
			default:
				why := podGroupMismatch(p, k.node, k.claim)
				checks[i] = &podGroupCheck{ok: why == "", why: why, at: now}
			}
			return nil
		})
	}
	_ = g.Wait()
	byName := nodesByName(looked)
	for i, k := range todo {
		ch := checks[i]
		if ch == nil {
			continue
		}
		was, known := a.gangs[k]
		a.gangs[k] = *ch
		if !ch.ok && (!known || was.ok) {
			v := byName[k.node]
			a.log.Warn("a node's pod group not believed", "node", k.node, "pod_group", k.claim.Group(), "pod", k.claim.Pod, "why", ch.why)
			a.nodeEvent(k.node, v.UID, true, protocol.EventPodGroupRefused, fmt.Sprintf(
				"The node's agent says it runs the pod group %s, with the pod %s, but %s: the node is put in no gang for it (%s)", k.claim.Group(), k.claim.Pod, ch.why, protocol.AnnotationPodGroups))
		}
	}
}

// podGroupMismatch says why p does not show that node runs claim's pod
// group ("" when it does): it must be bound to node, name the group, run
// (not finished), and not be a mirror pod, which a node writes itself.
func podGroupMismatch(p *corev1.Pod, node string, claim protocol.PodGroupClaim) string {
	c, ok := protocol.PodGroupOf(p)
	switch {
	case p.Spec.NodeName != node:
		return fmt.Sprintf("the pod runs on %q", p.Spec.NodeName)
	case !ok || c.PodGroup != claim.PodGroup:
		return "the pod is not in that pod group"
	case p.Annotations[corev1.MirrorPodAnnotationKey] != "":
		return "the pod is a mirror pod, which the node writes itself"
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return "the pod has finished"
	}
	return ""
}

// groupsOf names v's pod groups.
func groupsOf(v *fleet.Node) string {
	var out []string
	for _, c := range v.PodGroups {
		out = append(out, c.Group())
	}
	if len(out) == 0 {
		return "(none now)"
	}
	return fmt.Sprint(out)
}

// nodesByName indexes nodes by name.
func nodesByName(nodes []*fleet.Node) map[string]*fleet.Node {
	out := make(map[string]*fleet.Node, len(nodes))
	for _, n := range nodes {
		out[n.Name] = n
	}
	return out
}
