package plugin

import (
	"strings"
	"testing"
	"time"
)

// TestWriteTableEveryPart: a status with a node of each kind of line (idle,
// busy, draining with its conditions, an open window, unreadable values),
// a slice host shown on its slice's line only, a fault and a pool is
// written line for line as kubectl maintenance status prints it, plain and
// wide.
func TestWriteTableEveryPart(t *testing.T) {
	st := everyPart()
	for _, wide := range []bool{false, true} {
		var out strings.Builder
		if err := st.WriteTable(&out, now, time.UTC, wide); err != nil {
			t.Fatal(err)
		}
		want := tableWant
		if wide {
			want = tableWantWide
		}
		if got := out.String(); got != want {
			t.Errorf("wide=%v:\n%s\nwant:\n%s", wide, got, want)
		}
	}
}

// everyPart is a status with a line of every kind.
func everyPart() Status {
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	two := 2
	return Status{
		Nodes: []NodeStatus{
			{Node: "idle", Pool: "a3", Phase: "Idle", IdleSince: at(-90 * time.Minute), Interruptions: map[string]int{"preemption": 1, "host_maintenance": 2}},
			{Node: "busy", Pool: "a3", Phase: "Idle", Busy: "train-0", WindowStart: at(time.Hour)},
			{Node: "draining", Pool: "a3", Phase: "Draining", Reason: "Preemption", Deadline: at(20 * time.Second), PodsLeft: 3,
				Decision: "MaintenanceStarted", DecisionWhy: "idle for 2h", Conditions: map[string]string{"MaintenanceInProgress": "True", "DrainInProgress": "True", "Drained": "False"}},
			{Node: "open", Phase: "Idle", WindowStart: at(-time.Hour), WindowOpen: true, WindowEnd: at(3 * time.Hour)},
			{Node: "odd", Pool: "a3", Phase: "Idle", WindowStart: at(-time.Hour), WindowOpen: true, Unreadable: []string{"maintenance-handler.io/state"}},
			{Node: "host-0", Pool: "v5p", Phase: "Idle"},
		},
		Slices:  []SliceStatus{{Slice: "v5p/s1", Pool: "v5p", Hosts: []string{"host-0"}, Size: 2, Phases: map[string]int{"Idle": 1}}},
		Faults:  []FaultStatus{{Node: "draining", Pool: "a3", Behavior: "repair", Source: "XID 79", State: "approved", Phase: "Draining", InRepair: 1, MaxInRepair: 1}},
		Pools:   []PoolStatus{{Pool: "a3", Nodes: 4, Pending: 1, InMaintenance: 1, Voluntary: 0, Cap: 1, MinNodes: &two, NextWindow: at(time.Hour), Config: "valid"}},
		Cluster: ClusterStatus{Voluntary: 0, Nodes: 6, Cap: 2},
	}
}

const tableWant = `NODE       POOL   WINDOW                                   PHASE        REASON       DEADLINE                    PODS LEFT   IDLE            DECISION             INTERRUPTIONS
idle       a3     -                                        Idle         -            -                           -           idle 1h30m      -                    host_maintenance=2,preemption=1
busy       a3     2026-11-23 13:00 (in 1h0m)               Idle         -            -                           -           busy: train-0   -                    -
draining   a3     -                                        Draining     Preemption   2026-11-23 12:00 (in 20s)   3           -               MaintenanceStarted   -
open       -      open until 2026-11-23 15:00 (in 3h0m)    Idle         -            -                           -           -               -                    -
odd        a3     open since 2026-11-23 11:00 (1h0m ago)   unreadable   -            -                           -           -               -                    -

UNREADABLE: their agents wrote values this version cannot read; each counts as absent above, and the aggregator does not pick these nodes
  odd: maintenance-handler.io/state

FAULTY NODE   POOL   BEHAVIOR   SEEN BY   REPAIR                POOL IN REPAIR
draining      a3     repair     XID 79    approved (Draining)   1 of 1

SLICE    POOL   HOSTS            WINDOW   PHASES   CAUSE   DEADLINE   PODS LEFT
v5p/s1   v5p    1 of 2: host-0   -        Idle=1   -       -          0

POOL   NODES   PENDING   IN MAINTENANCE   VOLUNTARY   CAP   MIN-NODES   NEXT WINDOW                  CONFIG
a3     4       1         1                0           1     2           2026-11-23 13:00 (in 1h0m)   valid

Cluster: 0 of 6 nodes in voluntary maintenance (cap 2, which the pools share).
`

const tableWantWide = `NODE       POOL   WINDOW                                   PHASE        REASON       DEADLINE                    PODS LEFT   IDLE            DECISION             INTERRUPTIONS                     CONDITIONS                              WHY
idle       a3     -                                        Idle         -            -                           -           idle 1h30m      -                    host_maintenance=2,preemption=1   -                                       -
busy       a3     2026-11-23 13:00 (in 1h0m)               Idle         -            -                           -           busy: train-0   -                    -                                 -                                       -
draining   a3     -                                        Draining     Preemption   2026-11-23 12:00 (in 20s)   3           -               MaintenanceStarted   -                                 MaintenanceInProgress,DrainInProgress   idle for 2h
open       -      open until 2026-11-23 15:00 (in 3h0m)    Idle         -            -                           -           -               -                    -                                 -                                       -
odd        a3     open since 2026-11-23 11:00 (1h0m ago)   unreadable   -            -                           -           -               -                    -                                 -                                       -

UNREADABLE: their agents wrote values this version cannot read; each counts as absent above, and the aggregator does not pick these nodes
  odd: maintenance-handler.io/state

FAULTY NODE   POOL   BEHAVIOR   SEEN BY   REPAIR                POOL IN REPAIR
draining      a3     repair     XID 79    approved (Draining)   1 of 1

SLICE    POOL   HOSTS            WINDOW   PHASES   CAUSE   DEADLINE   PODS LEFT
v5p/s1   v5p    1 of 2: host-0   -        Idle=1   -       -          0

POOL   NODES   PENDING   IN MAINTENANCE   VOLUNTARY   CAP   MIN-NODES   NEXT WINDOW                  CONFIG
a3     4       1         1                0           1     2           2026-11-23 13:00 (in 1h0m)   valid

Cluster: 0 of 6 nodes in voluntary maintenance (cap 2, which the pools share).
`
