package window

// The parts of a rule, one parser each, and the checks of which go
// together (RFC 5545, section 3.3.10).

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// ruleParts parse each part of a rule into r, one clause of RFC 5545's
// RECUR (section 3.3.10) each.
var ruleParts = map[string]func(r *Rule, key, val string) error{
	"FREQ":  parseFreq,
	"UNTIL": func(r *Rule, _, val string) (err error) { r.Until, err = parseUntil(val); return err },
	"INTERVAL": func(r *Rule, key, val string) (err error) {
		r.Interval, err = parsePositive(key, val)
		return err
	},
	"COUNT": func(r *Rule, key, val string) (err error) {
		r.Count, err = parsePositive(key, val)
		return err
	},
	"WKST": func(r *Rule, _, val string) error {
		d, ok := weekdays[strings.ToUpper(val)]
		if !ok {
			return ruleErr("WKST=%s: want MO, TU, WE, TH, FR, SA or SU", val)
		}
		r.WeekStart = d
		return nil
	},
	"BYDAY": func(r *Rule, _, val string) error {
		for _, v := range strings.Split(strings.ToUpper(val), ",") {
			wd, err := parseWeekdayNum(v)
			if err != nil {
				return err
			}
			r.ByDay = append(r.ByDay, wd)
		}
		return nil
	},
	"BYMONTHDAY": func(r *Rule, key, val string) (err error) { r.ByMonthDay, err = parseInts(key, val, 31); return err },
	"BYYEARDAY":  func(r *Rule, key, val string) (err error) { r.ByYearDay, err = parseInts(key, val, 366); return err },
	"BYSETPOS":   func(r *Rule, key, val string) (err error) { r.BySetPos, err = parseInts(key, val, 366); return err },
	"BYMONTH": func(r *Rule, _, val string) error {
		for _, v := range strings.Split(val, ",") {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 12 {
				return ruleErr("BYMONTH=%s: want months 1 to 12", val)
			}
			r.ByMonth = append(r.ByMonth, time.Month(n))
		}
		return nil
	},
}

// parseFreq reads FREQ: a window recurs at most daily.
func parseFreq(r *Rule, _, val string) error {
	switch f := Freq(strings.ToUpper(val)); f {
	case Daily, Weekly, Monthly, Yearly:
		r.Freq = f
		return nil
	case "HOURLY", "MINUTELY", "SECONDLY":
		return ruleErr("FREQ=%s: a maintenance window recurs at most daily (DAILY, WEEKLY, MONTHLY or YEARLY)", val)
	default:
		return ruleErr("FREQ=%s: want DAILY, WEEKLY, MONTHLY or YEARLY", val)
	}
}

// parsePositive reads a positive whole number.
func parsePositive(key, val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil || n < 1 {
		return n, ruleErr("%s=%s: want a positive integer", key, val)
	}
	return n, nil
}

// checkRule holds r's parts to those that go together with its FREQ (RFC
// 5545, section 3.3.10).
func checkRule(r Rule) error {
	switch {
	case r.Freq == "":
		return ruleErr("FREQ is required")
	case r.Count > 0 && !r.Until.IsZero():
		return ruleErr("COUNT and UNTIL together")
	case len(r.ByMonthDay) > 0 && r.Freq == Weekly:
		return ruleErr("BYMONTHDAY with FREQ=WEEKLY")
	case len(r.ByYearDay) > 0 && r.Freq != Yearly:
		return ruleErr("BYYEARDAY needs FREQ=YEARLY")
	case len(r.BySetPos) > 0 && len(r.ByDay)+len(r.ByMonthDay)+len(r.ByMonth)+len(r.ByYearDay) == 0:
		return ruleErr("BYSETPOS needs another BY part (such as BYDAY) to pick from")
	}
	if r.Freq != Monthly && r.Freq != Yearly && slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool { return w.N != 0 }) {
		return ruleErr("BYDAY ordinals (such as 1SA) need FREQ=MONTHLY or YEARLY")
	}
	inMonth := r.Freq == Monthly || len(r.ByMonth) > 0
	if inMonth && slices.ContainsFunc(r.ByDay, func(w WeekdayNum) bool { return w.N > 5 || w.N < -5 }) {
		return ruleErr("BYDAY ordinals within a month are 1 to 5 or -5 to -1")
	}
	return nil
}
