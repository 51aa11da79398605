package aggregator

// The hourly bound on what one node's agent adds to its pool's counters,
// held by the node's name (not its Node object: a Node deleted and created
// again is the same VM), each entry going once its hour is over.

import "time"

// MaxClaimsPerHour is the most interruptions one Node's agent may add to
// its pool's counters in an hour: a VM stops and boots again in minutes,
// and the agent counts one interruption at a time, so more is an agent
// broken or compromised, whose claims past it are a Warning and a metric,
// never counts that fire the pool's alerts.
const MaxClaimsPerHour = 4

// claimWindow holds, by node, when each interruption it added to its
// pool's counters within the last hour was counted.
type claimWindow map[string][]time.Time

// admit takes n claims of node at now and returns how many of them fit
// within MaxClaimsPerHour (the first ones); those are remembered.
func (w claimWindow) admit(node string, n int, now time.Time) int {
	return w.admitUpTo(node, n, MaxClaimsPerHour, now)
}

// admitUpTo is admit, within limit an hour.
func (w claimWindow) admitUpTo(node string, n, limit int, now time.Time) int {
	recent := w[node][:0]
	for _, at := range w[node] {
		if now.Sub(at) < time.Hour {
			recent = append(recent, at)
		}
	}
	fits := min(n, max(limit-len(recent), 0))
	for range fits {
		recent = append(recent, now)
	}
	if len(recent) == 0 {
		delete(w, node)
	} else {
		w[node] = recent
	}
	return fits
}

// prune forgets the nodes that claimed nothing within the hour before
// now: the bound holds by name, not by Node object, and goes with time.
func (w claimWindow) prune(now time.Time) {
	for node, times := range w {
		if len(times) == 0 || now.Sub(times[len(times)-1]) >= time.Hour {
			delete(w, node)
		}
	}
}
