package aggregator

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/fleet"
	"github.com/maintenance-handler/maintenance-handler/protocol"
)

// announceUnproven warns, once per maintenance, of each node whose own
// maintenance is under way while its membership of the multi-host slice
// or reservation group its labels name is not proven
// (protocol.Grouping.Unproven): that maintenance moves no other member
// (lifecycle.Believed), and the Warning on the node says why. Each is
// counted once (Metrics.UnprovenMaintenances).
func (a *Aggregator) announceUnproven(nodes *fleet.Fleet, decidedOn map[string]*corev1.Node) {
	g := a.opts.grouping()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastUnproven == nil {
		a.lastUnproven = map[string]string{}
	}
	seen := map[string]bool{}
	for _, v := range nodes.All() {
		n := decidedOn[v.Name]
		if n == nil || v.Slice == "" || !v.SliceUnproven || v.Reason == protocol.ReasonSlice || !(protocol.AgentState{Phase: v.Phase}).Active() {
			continue
		}
		why := g.Unproven(n)
		if why == "" {
			continue
		}
		seen[v.Name] = true
		told := fmt.Sprintf("%s %s %s %s", v.Slice, v.Reason, v.Started.Format(time.RFC3339), why)
		if a.lastUnproven[v.Name] == told {
			continue
		}
		a.lastUnproven[v.Name] = told
		a.opts.Metrics.UnprovenMaintenances.Inc()
		a.log.Warn("a node's own maintenance moves no other member of the group it names: its membership is not proven", "node", v.Name, "group", v.Slice, "reason", v.Reason, "why", why)
		a.nodeEvent(v.Name, v.UID, true, protocol.EventGroupUnproven, fmt.Sprintf(
			"This node's maintenance (%s) moves no other member of the %s group %s its labels name: its membership is not proven, %s", v.Reason, v.GroupKind, v.Slice, why))
	}
	for name := range a.lastUnproven {
		if !seen[name] {
			delete(a.lastUnproven, name)
		}
	}
}
