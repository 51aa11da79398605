package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/maintenance-handler/maintenance-handler/maintenance"
)

// Budget caps the nodes in voluntary (manual or opportunistic) maintenance
// at once, as a count or a percentage of the nodes, like a rolling
// update's maxUnavailable.
type Budget struct {
	Count   int
	Percent int // used when Count is 0
}

// Default budgets: one node of a pool at a time, and at most a tenth of the
// cluster's nodes (at least one).
var (
	DefaultPoolBudget    = Budget{Count: 1}
	DefaultClusterBudget = Budget{Percent: 10}
)

// Of is the budget for total nodes: a percentage rounds down, but is at
// least 1 of a non-empty set.
func (b Budget) Of(total int) int {
	if b.Count > 0 {
		return b.Count
	}
	n := total * b.Percent / 100
	if n < 1 && total > 0 && b.Percent > 0 {
		n = 1
	}
	return n
}

func (b Budget) String() string {
	if b.Count > 0 {
		return strconv.Itoa(b.Count)
	}
	return strconv.Itoa(b.Percent) + "%"
}

// ParseBudget parses "2" or "25%": a count of at least 1, or a percentage
// from 1 to 100.
func ParseBudget(field, v string) (Budget, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return Budget{}, fmt.Errorf("%s %q: want a whole percentage from 1%% to 100%%, or a count", field, maintenance.Excerpt(v))
		}
		return Budget{Percent: n}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return Budget{}, fmt.Errorf("%s %q: want a count of 1 or more, or a percentage such as 10%%", field, maintenance.Excerpt(v))
	}
	return Budget{Count: n}, nil
}

// countOrPercent is a budget as policy.yaml writes it: a count, as a
// number (2) or a string ("2"), or a percentage ("10%"). YAML reads a
// bare 2 as a number; both mean the same.
type countOrPercent string

func (c *countOrPercent) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		if _, err := n.Int64(); err != nil {
			return fmt.Errorf("%s: want a whole count or a percentage", n)
		}
		*c = countOrPercent(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: want a count or a percentage", b)
	}
	*c = countOrPercent(s)
	return nil
}
