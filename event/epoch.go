package event

import "time"

// Epoch integer parts with more digits than these are out of any range a
// row key holds (10^15 ms is the year 33658), and refusing them early keeps
// the arithmetic below far from overflow.
const (
	maxMillisDigits  = 15
	maxSecondsDigits = 12
	// autoMillis is where Auto takes a number for milliseconds.
	autoMillis = 100_000_000_000
)

// parseEpoch reads a decimal number of epoch milliseconds or seconds,
// -?[0-9]+(\.[0-9]+)?, exactly (no float rounding: 1795297116.069 s is
// .069 s, not .068999), digits past the nanosecond dropped. format Auto
// picks the unit by magnitude. On failure it returns what the text is not,
// for the reason.
func parseEpoch(s string, format TimeFormat) (time.Time, string) {
	neg := len(s) > 0 && s[0] == '-'
	i := 0
	if neg {
		i++
	}
	intStart := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intDigits := s[intStart:i]
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[fs:i]
		if frac == "" {
			i = -1
		}
	}
	unit := format
	if i != len(s) || intDigits == "" {
		return time.Time{}, "a plain decimal number of epoch " + unitName(unit) + " (digits, an optional fraction, no exponent)"
	}
	// Leading zeros do not count towards the range.
	for len(intDigits) > 1 && intDigits[0] == '0' {
		intDigits = intDigits[1:]
	}
	if len(intDigits) > maxMillisDigits {
		return time.Time{}, "within the range of times a row key can hold"
	}
	var n int64
	for _, c := range []byte(intDigits) {
		n = n*10 + int64(c-'0')
	}
	if unit == Auto {
		unit = UnixSeconds
		if n >= autoMillis {
			unit = UnixMillis
		}
	}
	scale := int64(time.Millisecond)
	if unit == UnixSeconds {
		if len(intDigits) > maxSecondsDigits {
			return time.Time{}, "within the range of times a row key can hold"
		}
		scale = int64(time.Second)
	}
	// The fraction, in nanoseconds.
	var ns int64
	for d, p := 0, scale/10; d < len(frac) && p > 0; d, p = d+1, p/10 {
		ns += int64(frac[d]-'0') * p
	}
	if neg {
		n, ns = -n, -ns
	}
	if unit == UnixSeconds {
		return time.Unix(n, ns).UTC(), ""
	}
	return time.UnixMilli(n).Add(time.Duration(ns)).UTC(), ""
}

// looksNumeric says whether a text event time is meant as a number, for
// Auto: an RFC 3339 time has a dash after its four-digit year, a number
// never has, and a negative number starts with one.
func looksNumeric(s string) bool {
	if len(s) == 0 {
		return false
	}
	if s[0] == '-' {
		return true
	}
	return len(s) < 5 || s[4] != '-'
}

// epochInt is parseEpoch for an integer of a schema's type (an Avro long,
// a Protobuf int64): the same units and ranges, without text.
func epochInt(n int64, format TimeFormat) (time.Time, string) {
	unit := format
	if unit == Auto {
		unit = UnixSeconds
		if n >= autoMillis || n <= -autoMillis {
			unit = UnixMillis
		}
	}
	const maxMillis, maxSeconds = 999_999_999_999_999, 999_999_999_999 // 15 and 12 digits
	if unit == UnixSeconds {
		if n > maxSeconds || n < -maxSeconds {
			return time.Time{}, "within the range of times a row key can hold"
		}
		return time.Unix(n, 0).UTC(), ""
	}
	if n > maxMillis || n < -maxMillis {
		return time.Time{}, "within the range of times a row key can hold"
	}
	return time.UnixMilli(n).UTC(), ""
}
