// Package duration parses and prints durations the way tenants.yaml and the
// command line write them: Go's units plus days.
package duration

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Day is 24 hours; retention has no time zones.
const Day = 24 * time.Hour

// Parse is time.ParseDuration that also accepts days: "2d", "1d12h",
// "90m", "1.5d".
func Parse(s string) (time.Duration, error) {
	orig := s
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && (s[i] == '.' || s[i] >= '0' && s[i] <= '9') {
			i++
		}
		j := i
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		num, unit := s[:i], s[i:j]
		if num == "" || unit == "" {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 90m, 36h, 2d, 1d12h)", orig)
		}
		var d time.Duration
		var err error
		if unit == "d" {
			d, err = time.ParseDuration(num + "h")
			if err == nil {
				if d > math.MaxInt64/24 {
					return 0, fmt.Errorf("duration %q is out of range", orig)
				}
				d *= 24
			}
		} else {
			d, err = time.ParseDuration(num + unit)
		}
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 90m, 36h, 2d, 1d12h)", orig)
		}
		if total > math.MaxInt64-d {
			return 0, fmt.Errorf("duration %q is out of range", orig)
		}
		total += d
		s = s[j:]
	}
	if neg {
		total = -total
	}
	return total, nil
}

// Format writes d the way tenants.yaml does: "2d", "1h", "1d12h",
// "1m30s", "1.5s". Parse(Format(d)) == d.
func Format(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b strings.Builder
	if d < 0 {
		b.WriteByte('-')
		d = -d
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{Day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if d >= u.d {
			fmt.Fprintf(&b, "%d%s", d/u.d, u.name)
			d %= u.d
		}
	}
	if d > 0 {
		b.WriteString(d.String())
	}
	return b.String()
}
