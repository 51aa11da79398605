package protocol

import (
	"encoding/json"
	"strings"
	"time"
)

// Call is the Compute Engine call the node's agent made last, and what is
// known of it: the value of AnnotationOperation. It is part of the node's
// state whatever maintenance is under way, taken over, withdrawn or none,
// so that no second call is made while Compute Engine may still carry out
// the first (a report is refused while another one's operation runs).
type Call struct {
	// RequestID is the call's requestId: a retry with it is the same
	// request.
	RequestID string `json:"request"`
	// Method is the method asked with: RepairReport, or
	// RepairPerformMaintenance for any performMaintenance (a manual
	// maintenance's, its reservation group's, a booked repair's).
	Method RepairCall `json:"method,omitempty"`
	// Requested is when it was first asked for (written before the call).
	Requested time.Time `json:"requested"`
	// Operation names Compute Engine's operation, once the call was
	// answered; Done says that it has ended, and Failed that it ended in
	// an error.
	Operation string `json:"operation,omitempty"`
	Done      bool   `json:"done,omitempty"`
	Failed    bool   `json:"failed,omitempty"`
}

// IsZero: no call is recorded.
func (c Call) IsZero() bool { return c.RequestID == "" && c.Operation == "" }

func (c Call) encode() string {
	if c.IsZero() {
		return ""
	}
	c.Requested = c.Requested.UTC()
	b, _ := json.Marshal(c)
	return string(b)
}

// decodeCall reads AnnotationOperation. An agent before the record wrote
// the operation's name alone, while a maintenance was under way: legacy
// is that maintenance's call, filled in with the name; nothing where none
// was under way (legacy is zero then). A record that cannot be read is
// none.
func decodeCall(raw string, legacy Call) Call {
	if raw == "" {
		return Call{}
	}
	if !strings.HasPrefix(raw, "{") {
		if legacy.RequestID == "" {
			return Call{}
		}
		legacy.Operation = raw
		return legacy
	}
	var c Call
	if json.Unmarshal([]byte(raw), &c) != nil || c.RequestID == "" && c.Operation == "" {
		return Call{}
	}
	if c.Method != RepairReport && c.Method != RepairPerformMaintenance {
		c.Method = ""
	}
	return c
}

// readCall is st's call: AnnotationOperation's value raw, or, as an agent
// before the record wrote them, the name of the operation of the
// maintenance under way, or that of a report the node's last repair gave
// up following (LastFaultRepair.Operation, then cleared: the call holds
// it).
func readCall(raw string, st *AgentState) Call {
	legacy := Call{}
	if st.Active() && st.RequestID != "" {
		method := RepairPerformMaintenance
		if st.RepairCall == RepairReport {
			method = RepairReport
		}
		legacy = Call{RequestID: st.RequestID, Method: method, Requested: st.Requested}
	}
	c := decodeCall(raw, legacy)
	if op := st.LastRepair.Operation; c.IsZero() && op != "" {
		c = Call{Method: RepairReport, Requested: st.LastRepair.Ended, Operation: op}
	}
	st.LastRepair.Operation = ""
	return c
}
