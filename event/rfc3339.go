package event

import "time"

// parseRFC3339 parses an RFC 3339 date-time without allocating. It accepts
// everything the RFC's grammar does, which time.Parse does not: a lowercase
// "t" and "z" (section 5.6 allows them), a leap second ":60", and fractions
// of any length (digits past the nanosecond are dropped). A leap second is
// the instant one second after ":59", the start of the next minute, as Unix
// time has no leap seconds. The result is in UTC.
func parseRFC3339(s string) (time.Time, bool) {
	// 2006-01-02T15:04:05 is 19 bytes; at least a "Z" follows.
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	if s[10] != 'T' && s[10] != 't' {
		return time.Time{}, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 60 {
		return time.Time{}, false
	}
	rest := s[19:]
	nanos := 0
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			if n <= 9 {
				nanos = nanos*10 + int(rest[n]-'0')
			}
			n++
		}
		if n == 1 {
			return time.Time{}, false // a dot needs at least one digit
		}
		for i := n; i <= 9; i++ {
			nanos *= 10
		}
		rest = rest[n:]
	}
	var offset int
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := digits(rest[1:3])
		om, okm := digits(rest[4:6])
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	// time.Date normalises second 60 into the next minute.
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), true
}

func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
