package plugin

// The status as a table, for a person.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/maintenance-handler/maintenance-handler/protocol"
)

func short(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// WriteTable writes st as kubectl writes tables, times in loc; wide adds
// the aggregator's message.
func (st Status) WriteTable(w io.Writer, now time.Time, loc *time.Location, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.In(loc).Format("2006-01-02 15:04") + " (" + In(*t, now) + ")"
	}
	header := "NODE\tPOOL\tWINDOW\tPHASE\tREASON\tDEADLINE\tPODS LEFT\tIDLE\tDECISION\tINTERRUPTIONS"
	if wide {
		header += "\tCONDITIONS\tWHY"
	}
	fmt.Fprintln(tw, header)
	inSlice := map[string]bool{}
	for _, ss := range st.Slices {
		for _, h := range ss.Hosts {
			inSlice[h] = true
		}
	}
	for _, n := range st.Nodes {
		if !inSlice[n.Node] { // else on its slice's line
			fmt.Fprintln(tw, strings.Join(n.row(now, at, wide), "\t"))
		}
	}
	st.writeUnreadable(tw)
	st.writeFaults(tw)
	st.writeSlices(tw, at)
	st.writeReservations(tw, at)
	st.writePools(tw, at)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nCluster: %d of %d nodes in voluntary maintenance (cap %d, which the pools share).\n", st.Cluster.Voluntary, st.Cluster.Nodes, st.Cluster.Cap)
	return err
}

// row is n's line of the node table: times by at, its conditions and the
// aggregator's message where wide.
func (n NodeStatus) row(now time.Time, at func(*time.Time) string, wide bool) []string {
	idle := "busy: " + n.Busy
	if n.IdleSince != nil {
		idle = "idle " + short(now.Sub(*n.IdleSince))
	} else if n.Busy == "" {
		idle = "-"
	}
	deadline, left := "-", "-"
	if n.Deadline != nil {
		deadline, left = at(n.Deadline), fmt.Sprint(n.PodsLeft)
	}
	var counts []string
	for k, v := range n.Interruptions {
		counts = append(counts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(counts)
	window := at(n.WindowStart)
	switch {
	case n.WindowOpen && n.WindowEnd != nil:
		window = "open until " + at(n.WindowEnd)
	case n.WindowOpen:
		window = "open since " + at(n.WindowStart)
	}
	phase := n.Phase
	if len(n.Unreadable) > 0 {
		phase = "unreadable"
	}
	row := []string{n.Node, dash(n.Pool), window, phase, dash(n.Reason), deadline, left, idle, dash(n.Decision), dash(strings.Join(counts, ","))}
	if !wide {
		return row
	}
	var on []string
	for _, typ := range protocol.NodeConditionTypes {
		if n.Conditions[string(typ)] == string(corev1.ConditionTrue) {
			on = append(on, string(typ))
		}
	}
	return append(row, dash(strings.Join(on, ",")), dash(n.DecisionWhy))
}

// writeUnreadable names the nodes whose agents wrote values this version
// cannot read, and what each wrote, if any.
func (st Status) writeUnreadable(tw io.Writer) {
	var unreadable []string
	for _, n := range st.Nodes {
		if len(n.Unreadable) > 0 {
			unreadable = append(unreadable, fmt.Sprintf("%s: %s", n.Node, strings.Join(n.Unreadable, ", ")))
		}
	}
	if len(unreadable) == 0 {
		return
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "UNREADABLE: their agents wrote values this version cannot read; each counts as absent above, and the aggregator does not pick these nodes")
	for _, u := range unreadable {
		fmt.Fprintln(tw, "  "+u)
	}
}

// writePools writes the pools' lines.
func (st Status) writePools(tw io.Writer, at func(*time.Time) string) {
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "POOL\tNODES\tPENDING\tIN MAINTENANCE\tVOLUNTARY\tCAP\tMIN-NODES\tNEXT WINDOW\tCONFIG")
	for _, p := range st.Pools {
		min := "-"
		if p.MinNodes != nil {
			min = fmt.Sprint(*p.MinNodes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", dash(p.Pool), p.Nodes, p.Pending, p.InMaintenance, p.Voluntary, p.Cap, min, at(p.NextWindow), p.Config)
	}
}

// writeFaults writes the faulty nodes' lines, if any.
func (st Status) writeFaults(tw io.Writer) {
	if len(st.Faults) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "FAULTY NODE\tPOOL\tBEHAVIOR\tSEEN BY\tREPAIR\tPOOL IN REPAIR")
		for _, f := range st.Faults {
			state := f.State
			if f.Phase != "" && f.Phase != string(protocol.PhaseIdle) {
				state += " (" + f.Phase + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d of %d\n", f.Node, dash(f.Pool), f.Behavior, f.Source, state, f.InRepair, f.MaxInRepair)
		}
	}
}

// writeReservations writes, for the reservation groups the aggregator
// reads, what Compute Engine last said of each, if any.
func (st Status) writeReservations(tw io.Writer, at func(*time.Time) string) {
	header := false
	for _, ss := range st.Slices {
		r := ss.Reservation
		if r == nil {
			continue
		}
		if !header {
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "RESERVATION GROUP\tRESERVATION\tSCOPE\tHOSTS PENDING\tHOSTS ONGOING\tGROUP WINDOW\tHEALTH\tBLOCK PENDING\tBLOCK ONGOING")
			header = true
		}
		var window *time.Time
		if !r.Window.IsZero() {
			window = &r.Window
		}
		block := [2]string{"-", "-"}
		if r.Scope == protocol.ReservationGroupSubblock {
			block = [2]string{fmt.Sprint(r.BlockPending), fmt.Sprint(r.BlockOngoing)}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", ss.Slice, r.Reservation, r.Scope, r.Pending, r.Ongoing, at(window), dash(r.Health), block[0], block[1])
	}
}

// writeSlices writes the multi-host slices' lines, if any.
func (st Status) writeSlices(tw io.Writer, at func(*time.Time) string) {
	if len(st.Slices) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "SLICE\tPOOL\tHOSTS\tWINDOW\tPHASES\tCAUSE\tDEADLINE\tPODS LEFT")
		for _, ss := range st.Slices {
			hosts := fmt.Sprintf("%d: %s", len(ss.Hosts), hostList(ss.Hosts))
			if ss.Size > len(ss.Hosts) {
				hosts = fmt.Sprintf("%d of %d: %s", len(ss.Hosts), ss.Size, hostList(ss.Hosts))
			}
			var phases []string
			for ph, k := range ss.Phases {
				phases = append(phases, fmt.Sprintf("%s=%d", ph, k))
			}
			sort.Strings(phases)
			cause := "-"
			if ss.Cause != "" {
				cause = ss.Cause + " (" + ss.Reason + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", ss.Slice, dash(ss.Pool), hosts, at(ss.WindowStart), strings.Join(phases, ","), cause, at(ss.Deadline), ss.PodsLeft)
		}
	}
}

// hostList names hosts, the first and last of a long list only.
func hostList(hosts []string) string {
	if len(hosts) <= 4 {
		return strings.Join(hosts, ",")
	}
	return hosts[0] + ",...," + hosts[len(hosts)-1]
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
