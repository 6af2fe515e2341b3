// Package rowkey owns the layout of cellttl's Bigtable rows: the row keys,
// the rules for the ids that go into them, and the columns (ColumnEvent,
// ColumnWrittenAt). The writer (sink) and the readers (reader, the tools)
// take the layout from here.
//
// A row key is
//
//		<tenant_id>#<bucket>#<user_id>#<millis>#<event_id>
//
//	  - tenant_id first, so that one tenant's rows form one contiguous range
//	    (per-tenant scans, per-tenant deletes with DropRowRange).
//	  - bucket is four hex digits of a hash of user_id (of event_id when the
//	    event has no user): within a tenant, writes spread evenly over 65,536
//	    slots instead of piling onto the newest time range, so Bigtable can
//	    split a busy tenant across nodes.
//	  - user_id next, so one user's events are contiguous: a scan of the prefix
//	    <tenant>#<bucket>#<user># reads that user alone.
//	  - millis is the event time (the TTL base) as 13 zero-padded digits of
//	    milliseconds since the Unix epoch, so a user's events come back in time
//	    order and a time window is a key range.
//	  - event_id last makes the key unique per event; a redelivered event maps
//	    to the same key.
//
// Ids must not contain '#', the separator, so no two distinct events can
// produce the same key.
package rowkey

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Column qualifiers within the family: the event as consumed, the real
// write time when the tenants file asks for it, and the event's own TTL
// when it gave one (--ttl-from). All cells of a row carry the same
// timestamp, so that they expire together.
const (
	ColumnEvent     = "event"
	ColumnWrittenAt = "written_at"
	ColumnTTL       = "ttl"
)

// TTLValueSize is the size of a ttl cell's value: the effective TTL, then
// the TTL the event asked for, each a big-endian int64 of milliseconds.
const TTLValueSize = 16

// AppendTTL appends a ttl cell's value to b.
func AppendTTL(b []byte, effective, requested time.Duration) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(effective.Milliseconds()))
	return binary.BigEndian.AppendUint64(b, uint64(requested.Milliseconds()))
}

// ParseTTL reads a ttl cell's value.
func ParseTTL(v []byte) (effective, requested time.Duration, err error) {
	if len(v) != TTLValueSize {
		return 0, 0, fmt.Errorf("a ttl cell holds %d bytes, want %d", len(v), TTLValueSize)
	}
	e, r := int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
	if e < 0 || r < 0 {
		return 0, 0, fmt.Errorf("a ttl cell holds a negative TTL (%d ms, %d ms)", e, r)
	}
	return millis(e), millis(r), nil
}

// millis is ms milliseconds, saturating where a Duration ends.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	}
	return time.Duration(ms) * time.Millisecond
}

// Sep separates the parts of a row key.
const Sep = '#'

// MaxIDBytes bounds tenant, user and event ids: with four of them and the
// fixed parts a key stays far below Bigtable's 4 KiB row key limit.
const MaxIDBytes = 128

// millisWidth fits every millisecond until the year 2286 in fixed width, so
// keys sort by time.
const millisWidth = 13

// MaxMillis is the last event time, in milliseconds since the Unix epoch,
// that a row key can hold: 2286-11-20T17:46:39.999Z. Later times would
// widen the key and break its order, so events past it are refused.
const MaxMillis = 9_999_999_999_999

// ValidateID checks an id against the rules every id in a row key follows:
// non-empty, at most MaxIDBytes bytes of valid UTF-8, no '#', no control
// characters. The error names the field and quotes the value.
func ValidateID(field, id string) error {
	problem := IDProblem(id)
	switch {
	case problem == "":
		return nil
	case id == "":
		return fmt.Errorf("%s %s", field, problem)
	case len(id) > MaxIDBytes:
		return fmt.Errorf("%s %.40q... %s", field, id, problem)
	}
	return fmt.Errorf("%s %q %s", field, id, problem)
}

// IDProblem says what is wrong with an id without quoting it ("contains
// '#', the row key separator"), "" when nothing is: for errors that reach
// logs, where the id must not.
func IDProblem(id string) string {
	if id == "" {
		return "is empty"
	}
	if len(id) > MaxIDBytes {
		return fmt.Sprintf("is %d bytes, more than %d", len(id), MaxIDBytes)
	}
	if !utf8.ValidString(id) {
		return "is not valid UTF-8"
	}
	for _, r := range id {
		if r == Sep {
			return "contains '#', the row key separator"
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return "contains a control character"
		}
	}
	return ""
}

// Build appends the row key of an event to dst and returns it. millis may be
// negative only for events long expired, which are never written; it is
// clamped to 0 so the key keeps its fixed width.
func Build(dst []byte, tenant, user, eventID string, millis int64) []byte {
	dst = append(dst, tenant...)
	dst = append(dst, Sep)
	dst = appendBucket(dst, user, eventID)
	dst = append(dst, Sep)
	dst = append(dst, user...)
	dst = append(dst, Sep)
	dst = appendMillis(dst, millis)
	dst = append(dst, Sep)
	dst = append(dst, eventID...)
	return dst
}

// Key returns the row key of an event with a single allocation.
func Key(tenant, user, eventID string, millis int64) string {
	b := Build(make([]byte, 0, len(tenant)+len(user)+len(eventID)+4+millisWidth+4), tenant, user, eventID, millis)
	// The buffer is never touched again: the string may own it.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// TenantPrefix is the prefix of every row of tenant.
func TenantPrefix(tenant string) string {
	return tenant + string(Sep)
}

// UserPrefix is the prefix of every row of one user of tenant.
func UserPrefix(tenant, user string) string {
	b := make([]byte, 0, len(tenant)+len(user)+8)
	b = append(b, tenant...)
	b = append(b, Sep)
	b = appendBucket(b, user, "")
	b = append(b, Sep)
	b = append(b, user...)
	b = append(b, Sep)
	return string(b)
}

// UserTimeKey is the smallest key of tenant's user at or after millis: with
// UserPrefix it bounds a time-window scan of one user.
func UserTimeKey(tenant, user string, millis int64) string {
	return string(appendMillis([]byte(UserPrefix(tenant, user)), millis))
}

// Parts are the fields of a row key.
type Parts struct {
	Tenant, User, EventID string
	Millis                int64
}

// PrefixEnd is the first key after every key with prefix: the end of a
// row range that holds the prefix's keys, "" (the table's end) when there
// is none.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// Describe names a row for logs, errors and spans without the ids it holds
// (user and event ids outlive no TTL there), nor a hash of them (an
// enumerable id hashed without a key is given back in seconds): a row of
// the layout by its tenant, bucket and event time, which find it again
// among few; any other by its size alone (its first field may be an id).
func Describe(key string) string {
	p, err := Parse(key)
	if err != nil {
		return fmt.Sprintf("a row of %d bytes not in cellttl's layout", len(key))
	}
	return fmt.Sprintf("row of tenant %s in bucket %s at %s", p.Tenant, strings.TrimSuffix(Position(key)[len(p.Tenant)+1:], string(Sep)),
		time.UnixMilli(p.Millis).UTC().Format("2006-01-02T15:04:05.000Z"))
}

// Position is how far a scan in key order has come, without ids: the
// tenant and the hash bucket of key (the key up to its second separator),
// or less of it for a key outside the layout. Resuming at Position
// re-reads at most the rest of one bucket.
func Position(key string) string {
	i := strings.IndexByte(key, Sep)
	if i < 0 {
		return ""
	}
	// Only a bucket of the layout (four hex digits): the second field of a
	// key outside it may be an id.
	if j := strings.IndexByte(key[i+1:], Sep); j == 4 && isHex(key[i+1:i+5]) {
		return key[:i+1+j+1]
	}
	return key[:i+1]
}

// Parse splits a row key built by Build.
func Parse(key string) (Parts, error) {
	var f [5]string
	rest := key
	for i := 0; i < 4; i++ {
		j := indexSep(rest)
		if j < 0 {
			return Parts{}, fmt.Errorf("row key %q has %d parts, want 5", key, i+1)
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	f[4] = rest
	millis, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || len(f[3]) != millisWidth {
		return Parts{}, fmt.Errorf("row key %q: time part %q is not %d digits", key, f[3], millisWidth)
	}
	return Parts{Tenant: f[0], User: f[2], EventID: f[4], Millis: millis}, nil
}

func indexSep(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == Sep {
			return i
		}
	}
	return -1
}

const hexDigits = "0123456789abcdef"

func appendBucket(dst []byte, user, eventID string) []byte {
	src := user
	if src == "" {
		src = eventID
	}
	// FNV-1a, inline: it runs per event and must not allocate.
	v := uint32(2166136261)
	for i := 0; i < len(src); i++ {
		v ^= uint32(src[i])
		v *= 16777619
	}
	return append(dst, hexDigits[v>>28&0xf], hexDigits[v>>24&0xf], hexDigits[v>>20&0xf], hexDigits[v>>16&0xf])
}

func appendMillis(dst []byte, millis int64) []byte {
	if millis < 0 {
		millis = 0
	}
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], millis, 10)
	for i := len(s); i < millisWidth; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(hexDigits, rune(s[i])) {
			return false
		}
	}
	return true
}
