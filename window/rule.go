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
	Yearly  Freq = "YEARLY"
)

// WeekdayNum is a BYDAY entry: a weekday, with an ordinal under MONTHLY
// or YEARLY (1 = first, -1 = last; 0 = every).
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
	ByMonth    []time.Month
	ByYearDay  []int
	// BySetPos picks occurrences by position within each period of FREQ
	// (1 = first, -1 = last) among those the other parts give.
	BySetPos  []int
	Until     time.Time // zero: none
	Count     int       // zero: none
	WeekStart time.Weekday
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
		parse, ok := ruleParts[key]
		switch {
		case key == "BYHOUR" || key == "BYMINUTE" || key == "BYSECOND":
			return r, ruleErr("%s is not supported: a window's time of day is its startTime's", key)
		case !ok:
			return r, ruleErr("%s is not supported (FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYMONTH, BYYEARDAY, BYSETPOS, UNTIL, COUNT, WKST are)", key)
		}
		if err := parse(&r, key, val); err != nil {
			return r, err
		}
	}
	return r, checkRule(r)
}

// parseInts parses a list of whole numbers from 1 to limit or -limit to -1.
func parseInts(key, val string, limit int) ([]int, error) {
	var out []int
	for _, v := range strings.Split(val, ",") {
		n, err := strconv.Atoi(v)
		if err != nil || n == 0 || n < -limit || n > limit {
			return nil, ruleErr("%s=%s: want numbers 1 to %d or -%d to -1", key, val, limit, limit)
		}
		out = append(out, n)
	}
	return out, nil
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
		if n, err = strconv.Atoi(num); err != nil || n == 0 || n < -53 || n > 53 {
			return WeekdayNum{}, ruleErr("BYDAY %q: the ordinal must be 1 to 53 or -53 to -1", v)
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
// rule's calendar pattern (INTERVAL, the BY parts, BYSETPOS), not UNTIL or
// COUNT.
func (r Rule) matchesDay(dtstart, t time.Time) bool {
	if t.Before(dtstart) || r.periodsBetween(dtstart, t)%r.Interval != 0 || !r.candidate(dtstart, t) {
		return false
	}
	if len(r.BySetPos) == 0 {
		return true
	}
	// The period's candidates, in order: t's position among them.
	from, to := r.period(t)
	var days []time.Time
	for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
		if r.candidate(dtstart, d) {
			days = append(days, d)
		}
	}
	i := slices.IndexFunc(days, func(d time.Time) bool { return d.Equal(civilDay(t)) })
	return slices.ContainsFunc(r.BySetPos, func(p int) bool { return p == i+1 || p == i-len(days) })
}

// candidate reports whether the day of t matches the BY parts (with the
// values RFC 5545 takes from dtstart where a FREQ needs one).
func (r Rule) candidate(dtstart, t time.Time) bool {
	if len(r.ByMonth) > 0 && !slices.Contains(r.ByMonth, t.Month()) {
		return false
	}
	if len(r.ByMonthDay) > 0 && !slices.ContainsFunc(r.ByMonthDay, func(n int) bool { return dayOfMonthIs(t, n) }) {
		return false
	}
	if len(r.ByYearDay) > 0 && !slices.ContainsFunc(r.ByYearDay, func(n int) bool { return dayOfYearIs(t, n) }) {
		return false
	}
	if len(r.ByDay) > 0 {
		// Ordinals count within the month under MONTHLY, or under YEARLY
		// with BYMONTH; within the year under YEARLY otherwise.
		inYear := r.Freq == Yearly && len(r.ByMonth) == 0
		if !slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool { return w.Day == t.Weekday() && (w.N == 0 || nthWeekday(t, inYear, w.N)) }) {
			return false
		}
	}
	noDay := len(r.ByDay) == 0 && len(r.ByMonthDay) == 0 && len(r.ByYearDay) == 0
	switch r.Freq {
	case Weekly:
		return len(r.ByDay) > 0 || t.Weekday() == dtstart.Weekday()
	case Monthly:
		return !noDay || t.Day() == dtstart.Day()
	case Yearly:
		switch {
		case !noDay:
			return true
		case len(r.ByMonth) > 0:
			return t.Day() == dtstart.Day()
		default:
			return t.Month() == dtstart.Month() && t.Day() == dtstart.Day()
		}
	}
	return true
}

// periodsBetween counts FREQ periods (days, weeks from WKST, months,
// years) from dtstart's to t's.
func (r Rule) periodsBetween(dtstart, t time.Time) int {
	switch r.Freq {
	case Weekly:
		return weeksBetween(dtstart, t, r.WeekStart)
	case Monthly:
		return (t.Year()-dtstart.Year())*12 + int(t.Month()-dtstart.Month())
	case Yearly:
		return t.Year() - dtstart.Year()
	}
	return daysBetween(dtstart, t)
}

// period is the FREQ period holding t's day: [from, to), whole days.
func (r Rule) period(t time.Time) (from, to time.Time) {
	day := civilDay(t)
	switch r.Freq {
	case Weekly:
		from = day.AddDate(0, 0, -((int(day.Weekday()) - int(r.WeekStart) + 7) % 7))
		return from, from.AddDate(0, 0, 7)
	case Monthly:
		from = time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, time.UTC)
		return from, from.AddDate(0, 1, 0)
	case Yearly:
		from = time.Date(day.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
		return from, from.AddDate(1, 0, 0)
	}
	return day, day.AddDate(0, 0, 1)
}

// dayOfMonthIs: t is the nth day of its month (n < 0: from the end).
func dayOfMonthIs(t time.Time, n int) bool {
	last := time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
	return n == t.Day() || n < 0 && last+1+n == t.Day()
}

// dayOfYearIs: t is the nth day of its year (n < 0: from the end).
func dayOfYearIs(t time.Time, n int) bool {
	days := time.Date(t.Year(), 12, 31, 0, 0, 0, 0, time.UTC).YearDay()
	return n == t.YearDay() || n < 0 && days+1+n == t.YearDay()
}

// nthWeekday: t is the nth of its weekday in its month, or in its year
// (n < 0: from the end).
func nthWeekday(t time.Time, inYear bool, n int) bool {
	pos, total := t.Day(), time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
	if inYear {
		pos, total = t.YearDay(), time.Date(t.Year(), 12, 31, 0, 0, 0, 0, time.UTC).YearDay()
	}
	if n > 0 {
		return (pos-1)/7+1 == n
	}
	return -((total-pos)/7 + 1) == n
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

// String writes r as an RRULE that ParseRule reads back to r: its parts in
// a fixed order, defaults (INTERVAL=1, WKST=MO) left out.
func (r Rule) String() string {
	parts := []string{"FREQ=" + string(r.Freq)}
	add := func(key string, vals []string) {
		if len(vals) > 0 {
			parts = append(parts, key+"="+strings.Join(vals, ","))
		}
	}
	ints := func(ns []int) []string {
		out := make([]string, len(ns))
		for i, n := range ns {
			out[i] = strconv.Itoa(n)
		}
		return out
	}
	if r.Interval != 1 {
		parts = append(parts, "INTERVAL="+strconv.Itoa(r.Interval))
	}
	var days []string
	for _, d := range r.ByDay {
		s := weekdayNames[d.Day]
		if d.N != 0 {
			s = strconv.Itoa(d.N) + s
		}
		days = append(days, s)
	}
	add("BYDAY", days)
	add("BYMONTHDAY", ints(r.ByMonthDay))
	var months []int
	for _, m := range r.ByMonth {
		months = append(months, int(m))
	}
	add("BYMONTH", ints(months))
	add("BYYEARDAY", ints(r.ByYearDay))
	add("BYSETPOS", ints(r.BySetPos))
	switch u := r.Until.UTC(); {
	case r.Until.IsZero():
	case u.Add(time.Nanosecond).Equal(civilDay(u).AddDate(0, 0, 1)):
		// A date: the whole day.
		parts = append(parts, "UNTIL="+u.Format("20060102"))
	default:
		parts = append(parts, "UNTIL="+u.Format("20060102T150405Z"))
	}
	if r.Count > 0 {
		parts = append(parts, "COUNT="+strconv.Itoa(r.Count))
	}
	if r.WeekStart != time.Monday {
		parts = append(parts, "WKST="+weekdayNames[r.WeekStart])
	}
	return strings.Join(parts, ";")
}

// weekdayNames are RRULE's weekdays.
var weekdayNames = map[time.Weekday]string{time.Monday: "MO", time.Tuesday: "TU", time.Wednesday: "WE",
	time.Thursday: "TH", time.Friday: "FR", time.Saturday: "SA", time.Sunday: "SU"}
