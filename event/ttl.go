package event

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// MaxRequestedTTL is what a request longer than a Duration holds (about 292
// years) reads as: far beyond any bound, so it is clamped like any other
// request above max_ttl rather than refused. Whole milliseconds, as every
// TTL.
const MaxRequestedTTL = time.Duration(math.MaxInt64 - math.MaxInt64%int64(time.Millisecond))

// ttl reads the event's own TTL, when the mapping reads one and the event
// gives it: absent or null leaves the tenant's TTL.
func (m *Mapping) ttl(f *fields, r *Source) (time.Duration, bool, error) {
	src := &m.src[fieldTTL]
	if src.kind == fromNowhere {
		return 0, false, nil
	}
	fl, err := m.value(fieldTTL, f, r)
	if err != nil {
		return 0, false, err
	}
	if !fl.present || fl.isNull {
		return 0, false, nil
	}
	if fl.typed == typedInt {
		// An integer of the value's schema: whole seconds.
		switch {
		case fl.num < 0:
			return 0, false, &Error{Class: BadTTL, Field: src.field, Reason: fmt.Sprintf("%s %d is negative", src.name, fl.num)}
		case fl.num == 0:
			return 0, false, nil
		}
		return saturate(strconv.FormatInt(fl.num, 10), time.Second), true, nil
	}
	if src.kind == fromJSON {
		switch fl.kind {
		case "":
			if err := stringField(src, fl); err != nil {
				return 0, false, err
			}
		case "number":
			if !wholeNumber(fl.s) {
				return 0, false, &Error{Class: BadTTL, Field: src.field, Reason: fmt.Sprintf("%s %s is not a whole number of seconds (or give a duration string such as \"90m\")", src.name, clip(fl.s))}
			}
		default:
			return 0, false, &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s must be a duration string such as \"90m\" or a whole number of seconds, not %s", src.name, fl.what())}
		}
	}
	text := fl.s
	if fl.kind == "number" {
		text, _, _ = strings.Cut(text, ".") // 3600.0: whole seconds
	}
	d, why := parseTTL(text)
	if why != "" {
		return 0, false, &Error{Class: BadTTL, Field: src.field, Reason: fmt.Sprintf("%s %s %s", src.name, strconv.Quote(clip(fl.s)), why)}
	}
	if d == 0 {
		// 0 is no TTL of its own, as Cassandra's TTL 0 is no TTL: an
		// event that said 0 keeps its tenant's, rather than vanish.
		return 0, false, nil
	}
	// Cut to the millisecond, the cell timestamp's granularity: never
	// lengthened (a request under a millisecond lives none).
	return d.Truncate(time.Millisecond), true, nil
}

// wholeNumber reports whether a JSON number is a whole non-negative one
// without an exponent: 3600, 3600.0.
func wholeNumber(s string) bool {
	whole, frac, _ := strings.Cut(s, ".")
	return allDigits(whole) && strings.Trim(frac, "0") == ""
}

// ttlUnits are the units of tenants.yaml's durations (Go's, and days).
var ttlUnits = [...]struct {
	name string
	d    time.Duration
}{{"ns", time.Nanosecond}, {"us", time.Microsecond}, {"µs", time.Microsecond}, {"μs", time.Microsecond},
	{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}

// parseTTL reads a TTL in tenants.yaml's grammar (90m, 2d, 1d12h, 1.5h) or
// a whole number of seconds (3600), without allocating: it runs on every
// event. It agrees with duration.Parse on what both accept, but a value
// too long for a Duration saturates at MaxRequestedTTL instead of failing,
// and a negative one is refused. On failure it returns what is wrong, for
// the reason.
func parseTTL(s string) (time.Duration, string) {
	const want = "is not a TTL: want a duration such as 90m, 2d or 1d12h, or a whole number of seconds"
	if s != "" && s[0] == '+' {
		s = s[1:]
	}
	switch {
	case s == "":
		return 0, "is empty: want a duration such as 90m, or a whole number of seconds"
	case s[0] == '-':
		return 0, "is negative"
	case allDigits(s):
		return saturate(s, time.Second), ""
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		whole := s[:i]
		var frac string
		if i < len(s) && s[i] == '.' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			frac, i = s[i+1:j], j
		}
		if whole == "" && frac == "" {
			return 0, want
		}
		j := i
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		unit, ok := time.Duration(0), false
		for _, u := range ttlUnits {
			if u.name == s[i:j] {
				unit, ok = u.d, true
				break
			}
		}
		if !ok {
			return 0, want
		}
		d := add(saturate(whole, unit), fraction(frac, unit))
		total = add(total, d)
		s = s[j:]
	}
	return total, ""
}

// saturate is digits × unit, or MaxRequestedTTL when that is too long.
func saturate(digits string, unit time.Duration) time.Duration {
	var n time.Duration
	for i := 0; i < len(digits); i++ {
		c := time.Duration(digits[i] - '0')
		if n > (MaxRequestedTTL-c)/10 {
			return MaxRequestedTTL
		}
		n = n*10 + c
	}
	if n != 0 && n > MaxRequestedTTL/unit {
		return MaxRequestedTTL
	}
	return n * unit
}

// fraction is 0.digits × unit, exactly (to the nanosecond, rounded down;
// digits past the 18th dropped).
func fraction(digits string, unit time.Duration) time.Duration {
	var f, pow uint64 = 0, 1
	for i := 0; i < len(digits) && i < 18; i++ {
		f, pow = f*10+uint64(digits[i]-'0'), pow*10
	}
	hi, lo := bits.Mul64(f, uint64(unit))
	q, _ := bits.Div64(hi, lo, pow) // f < pow, so f × unit / pow < unit: no overflow
	return time.Duration(q)
}

// add is a + b for non-negative durations, saturating.
func add(a, b time.Duration) time.Duration {
	if a > MaxRequestedTTL-b {
		return MaxRequestedTTL
	}
	return a + b
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clip bounds how much of a bad value a reason quotes: it comes from the
// input, and reasons go into headers and logs.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
