package window

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Freq is an RRULE FREQ.
type Freq string

const (
	Daily   Freq = "DAILY"
	Weekly  Freq = "WEEKLY"
	Monthly Freq = "MONTHLY"
)

// WeekdayNum is a BYDAY entry: a weekday, with an ordinal under MONTHLY
// (1 = first, -1 = last; 0 = every).
type WeekdayNum struct {
	Day time.Weekday
	N   int
}

// Rule is a parsed RRULE.
type Rule struct {
	Freq       Freq
	Interval   int
	ByDay      []WeekdayNum
	ByMonthDay []int
	Until      time.Time // zero: none
	Count      int       // zero: none
	WeekStart  time.Weekday
}

var weekdays = map[string]time.Weekday{"MO": time.Monday, "TU": time.Tuesday, "WE": time.Wednesday,
	"TH": time.Thursday, "FR": time.Friday, "SA": time.Saturday, "SU": time.Sunday}

// ErrRule wraps every RRULE error.
var ErrRule = errors.New("invalid RRULE")

func ruleErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRule, fmt.Sprintf(format, args...))
}

// ParseRule parses an RRULE such as "FREQ=WEEKLY;BYDAY=SA,SU" (an
// "RRULE:" prefix is allowed).
func ParseRule(s string) (Rule, error) {
	r := Rule{Interval: 1, WeekStart: time.Monday}
	body := strings.TrimPrefix(strings.TrimSpace(s), "RRULE:")
	if body == "" {
		return r, ruleErr("empty; want for example FREQ=WEEKLY;BYDAY=SA,SU")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(body, ";") {
		key, val, ok := strings.Cut(part, "=")
		if !ok || val == "" {
			return r, ruleErr("%q is not NAME=VALUE", part)
		}
		key = strings.ToUpper(key)
		if seen[key] {
			return r, ruleErr("%s given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "FREQ":
			switch f := Freq(strings.ToUpper(val)); f {
			case Daily, Weekly, Monthly:
				r.Freq = f
			default:
				return r, ruleErr("FREQ=%s: want DAILY, WEEKLY or MONTHLY", val)
			}
		case "INTERVAL":
			if r.Interval, err = strconv.Atoi(val); err != nil || r.Interval < 1 {
				return r, ruleErr("INTERVAL=%s: want a positive integer", val)
			}
		case "COUNT":
			if r.Count, err = strconv.Atoi(val); err != nil || r.Count < 1 {
				return r, ruleErr("COUNT=%s: want a positive integer", val)
			}
		case "UNTIL":
			if r.Until, err = parseUntil(val); err != nil {
				return r, err
			}
		case "WKST":
			d, ok := weekdays[strings.ToUpper(val)]
			if !ok {
				return r, ruleErr("WKST=%s: want MO, TU, WE, TH, FR, SA or SU", val)
			}
			r.WeekStart = d
		case "BYDAY":
			for _, v := range strings.Split(strings.ToUpper(val), ",") {
				wd, err := parseWeekdayNum(v)
				if err != nil {
					return r, err
				}
				r.ByDay = append(r.ByDay, wd)
			}
		case "BYMONTHDAY":
			for _, v := range strings.Split(val, ",") {
				n, err := strconv.Atoi(v)
				if err != nil || n == 0 || n < -31 || n > 31 {
					return r, ruleErr("BYMONTHDAY=%s: want days 1 to 31 or -31 to -1", val)
				}
				r.ByMonthDay = append(r.ByMonthDay, n)
			}
		default:
			return r, ruleErr("%s is not supported (FREQ, INTERVAL, BYDAY, BYMONTHDAY, UNTIL, COUNT, WKST are)", key)
		}
	}
	switch {
	case r.Freq == "":
		return r, ruleErr("FREQ is required")
	case r.Count > 0 && !r.Until.IsZero():
		return r, ruleErr("COUNT and UNTIL together")
	case len(r.ByMonthDay) > 0 && r.Freq != Monthly:
		return r, ruleErr("BYMONTHDAY needs FREQ=MONTHLY")
	case r.Freq == Daily && len(r.ByDay) > 0:
		return r, ruleErr("BYDAY with FREQ=DAILY: use FREQ=WEEKLY")
	}
	if r.Freq != Monthly && slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool { return w.N != 0 }) {
		return r, ruleErr("BYDAY ordinals (such as 1SA) need FREQ=MONTHLY")
	}
	return r, nil
}

func parseWeekdayNum(v string) (WeekdayNum, error) {
	if len(v) < 2 {
		return WeekdayNum{}, ruleErr("BYDAY %q: want MO, TU, WE, TH, FR, SA or SU, optionally with an ordinal (1SA, -1SU)", v)
	}
	d, ok := weekdays[v[len(v)-2:]]
	if !ok {
		return WeekdayNum{}, ruleErr("BYDAY %q: want MO, TU, WE, TH, FR, SA or SU, optionally with an ordinal (1SA, -1SU)", v)
	}
	n := 0
	if num := v[:len(v)-2]; num != "" {
		var err error
		if n, err = strconv.Atoi(num); err != nil || n == 0 || n < -5 || n > 5 {
			return WeekdayNum{}, ruleErr("BYDAY %q: the ordinal must be 1 to 5 or -5 to -1", v)
		}
	}
	return WeekdayNum{Day: d, N: n}, nil
}

func parseUntil(v string) (time.Time, error) {
	for _, layout := range []string{"20060102T150405Z", "20060102"} {
		if t, err := time.Parse(layout, v); err == nil {
			if layout == "20060102" {
				t = t.Add(24*time.Hour - time.Nanosecond)
			}
			return t, nil
		}
	}
	return time.Time{}, ruleErr("UNTIL=%s: want YYYYMMDDTHHMMSSZ (UTC) or YYYYMMDD", v)
}

// matchesDay reports whether an occurrence of r, first starting at dtstart,
// starts on the day of t (same time of day as dtstart), counting only the
// rule's calendar pattern (INTERVAL, BYDAY, BYMONTHDAY), not UNTIL or COUNT.
func (r Rule) matchesDay(dtstart, t time.Time) bool {
	if t.Before(dtstart) {
		return false
	}
	switch r.Freq {
	case Daily:
		return daysBetween(dtstart, t)%r.Interval == 0
	case Weekly:
		if weeksBetween(dtstart, t, r.WeekStart)%r.Interval != 0 {
			return false
		}
		if len(r.ByDay) == 0 {
			return t.Weekday() == dtstart.Weekday()
		}
		return slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool { return w.Day == t.Weekday() })
	case Monthly:
		months := (t.Year()-dtstart.Year())*12 + int(t.Month()-dtstart.Month())
		if months%r.Interval != 0 {
			return false
		}
		last := time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
		if len(r.ByDay) == 0 && len(r.ByMonthDay) == 0 {
			return t.Day() == dtstart.Day()
		}
		if len(r.ByMonthDay) > 0 && !slices.ContainsFunc(r.ByMonthDay, func(n int) bool {
			return n == t.Day() || n < 0 && last+1+n == t.Day()
		}) {
			return false
		}
		if len(r.ByDay) > 0 {
			nth, nthFromEnd := (t.Day()-1)/7+1, -((last-t.Day())/7 + 1)
			return slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool {
				return w.Day == t.Weekday() && (w.N == 0 || w.N == nth || w.N == nthFromEnd)
			})
		}
		return true
	}
	return false
}

func civilDay(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func daysBetween(a, b time.Time) int {
	return int(civilDay(b).Sub(civilDay(a)).Hours() / 24)
}

func weeksBetween(a, b time.Time, wkst time.Weekday) int {
	startOfWeek := func(t time.Time) time.Time {
		back := (int(t.Weekday()) - int(wkst) + 7) % 7
		return civilDay(t).AddDate(0, 0, -back)
	}
	return daysBetween(startOfWeek(a), startOfWeek(b)) / 7
}
