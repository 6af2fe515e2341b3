// Package event decodes and validates click events, the JSON objects carried
// in Kafka message values. It knows nothing of Kafka or Bigtable: bytes and
// times in, an Event or an *Error naming the bad field out.
package event

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/cellttl/cellttl/rowkey"
)

// Event is a valid click event. Its strings may share memory with the
// value it was decoded from: the value must not change while the Event is
// in use (Kafka message values never do).
type Event struct {
	ID     string
	Tenant string
	User   string // optional, "" when absent
	// Base is the time the TTL counts from: occurred_at, else the Kafka
	// record timestamp; the record timestamp also when occurred_at lies more
	// than MaxClockSkew after it. It depends on the record alone, never on
	// when the record is processed, so a redelivered record makes the same
	// row and cells.
	Base time.Time
	// Clamped is set when occurred_at was more than MaxClockSkew ahead of the
	// record timestamp.
	Clamped bool
	// TTL is the retention the event asked for itself (Fields.TTL), when
	// HasTTL; the tenant's bounds then clamp it. A request too long for a
	// Duration reads as MaxRequestedTTL.
	TTL    time.Duration
	HasTTL bool
}

// Error says why an event was rejected. Field is the field at fault, as
// configured (a JSON path, header:NAME, key), or "" when the value as a
// whole is (not JSON, too large); Reason is a sentence that names the field
// and quotes the value; Class is one of a few words for metrics.
type Error struct {
	Field  string
	Reason string
	Class  Class
}

// Class groups reasons for rejecting an event into a bounded set, fit for
// a metric label.
type Class string

const (
	TooLarge  Class = "too_large"    // the value exceeds Decoder.MaxBytes
	NotJSON   Class = "not_json"     // the value is not a JSON object
	Missing   Class = "missing"      // a required field, or any time, is missing
	WrongType Class = "wrong_type"   // a field of the wrong JSON type, or inside a non-object
	BadID     Class = "invalid_id"   // an id that cannot go into a row key
	BadTime   Class = "invalid_time" // a time that cannot be read or a row key cannot hold
	BadTTL    Class = "invalid_ttl"  // an event's own TTL that cannot be read
	Ambiguous Class = "ambiguous"    // a field given twice or under another case, a lone surrogate
	// NoRecordTime is an event that gives its own time in a record without
	// a timestamp (Kafka's -1): nothing bounds the time it claims.
	NoRecordTime Class = "no_record_time"
	// The classes of values read through a schema registry (--value-format
	// avro, protobuf or json-schema).
	NotFramed     Class = "not_framed"     // no schema-registry framing: magic byte 0, a 4-byte schema id
	UnknownSchema Class = "unknown_schema" // the registry has no schema of the value's id (404)
	BadSchema     Class = "invalid_schema" // the id's schema cannot read values: another format, does not compile, no such message
	Undecodable   Class = "undecodable"    // the value's bytes do not decode with its schema
)

func (e *Error) Error() string { return e.Reason }

// Decoder holds the limits events are checked against and where their
// fields are read from.
type Decoder struct {
	// MaxBytes rejects larger values before they are parsed.
	MaxBytes int
	// MaxClockSkew is how far an event time may lie after the record
	// timestamp before the record timestamp is taken instead: a producer
	// whose clock runs ahead must not stretch a tenant's retention.
	MaxClockSkew time.Duration
	// Mapping says where the fields come from; nil is the contract's
	// field names.
	Mapping *Mapping
	// Values reads the fields of a value that is not plain JSON (Avro,
	// Protobuf, JSON Schema through a schema registry: package schema);
	// nil reads JSON, as the contract has it.
	Values ValueReader
}

// Source is the part of a Kafka record an event is read from.
type Source struct {
	Value []byte
	// Size is the value's length when Value holds only its first bytes (a
	// record too large to fetch whole), 0 otherwise.
	Size int64
	// Key is the record key, nil when the record has none.
	Key []byte
	// Time is the record timestamp, the zero Time when the record has none.
	Time time.Time
	// Headers holds the headers the mapping reads, in the order of
	// Mapping.Headers: the caller looks them up, as the record's headers
	// are the Kafka client's type.
	Headers [numFields]Header
}

// Header is what a record holds under one header name.
type Header struct {
	// Value is the last header of the name.
	Value []byte
	// Count is how many headers have the name: more than one is refused
	// as ambiguous, as a JSON field given twice is.
	Count int
}

// latestBase is the last millisecond the 13 digits of a row key's time can
// hold (2286-11-20T17:46:39.999Z).
var latestBase = time.UnixMilli(rowkey.MaxMillis).UTC()

// DecodeRecord validates r and returns its event. The result depends on r
// alone. The value must be a JSON object whatever the mapping: it is what
// the row stores. On an error about the event's time, the event's ids
// are returned with it; on any other, none.
func (d Decoder) DecodeRecord(r *Source) (Event, error) {
	m := d.Mapping
	if m == nil {
		m = contract
	}
	if size := max(int64(len(r.Value)), r.Size); d.MaxBytes > 0 && size > int64(d.MaxBytes) {
		return Event{}, &Error{Class: TooLarge, Reason: fmt.Sprintf("value is %d bytes, more than the limit of %d", size, d.MaxBytes)}
	}
	if d.Values != nil {
		// Returned by value: a pointer to the caller's fields handed
		// through the interface would put them on the heap, for JSON too.
		found, err := d.Values.ReadValue(r.Value, m)
		if err != nil {
			return Event{}, err
		}
		return d.event(m, &found.f, r)
	}
	var f fields
	err := parse(r.Value, m.root, &f)
	if err == errSyntax {
		return Event{}, invalidJSON(r.Value)
	}
	if err != nil {
		return Event{}, err
	}
	return d.event(m, &f, r)
}

// event validates the fields read of r and makes its event.
func (d Decoder) event(m *Mapping, f *fields, r *Source) (Event, error) {
	var (
		ev  Event
		err error
	)
	if ev.ID, err = m.id(fieldEventID, f, r, true); err != nil {
		return Event{}, err
	}
	if ev.Tenant, err = m.id(fieldTenant, f, r, true); err != nil {
		return Event{}, err
	}
	if ev.User, err = m.id(fieldUser, f, r, false); err != nil {
		return Event{}, err
	}
	if ev.Base, ev.Clamped, err = d.base(m, f, r); err != nil {
		// The ids are valid: returned, so that an erased user's event is
		// known as such though its time is not (see pipeline.Decide).
		return Event{ID: ev.ID, Tenant: ev.Tenant, User: ev.User}, err
	}
	if ev.TTL, ev.HasTTL, err = m.ttl(f, r); err != nil {
		// The ids and time are valid: returned, as for a time error.
		ev.TTL, ev.HasTTL = 0, false
		return ev, err
	}
	return ev, nil
}

// value finds field i of the record as text. A header or key is always
// text; a JSON value is checked by the caller.
func (m *Mapping) value(i int, f *fields, r *Source) (*field, error) {
	src := &m.src[i]
	switch src.kind {
	case fromHeader:
		h := &r.Headers[src.header]
		if h.Count > 1 {
			return nil, &Error{Class: Ambiguous, Field: src.field, Reason: fmt.Sprintf("%s appears %d times, and readers disagree on which to take", src.name, h.Count)}
		}
		f.f[i] = field{present: h.Count == 1, s: alias(h.Value)}
	case fromKey:
		f.f[i] = field{present: r.Key != nil, s: alias(r.Key)}
	}
	fl := &f.f[i]
	if fl.parent != "" {
		if fl.typeName != "" {
			return nil, &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s cannot be read: %s is %s, not a record", src.name, fl.parent, fl.typeName)}
		}
		return nil, &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s cannot be read: %s is a JSON %s, not an object", src.name, fl.parent, fl.kind)}
	}
	return fl, nil
}

// id reads one of the event's ids; one that is not required may be
// absent or null.
func (m *Mapping) id(i int, f *fields, r *Source, required bool) (string, error) {
	src := &m.src[i]
	fl, err := m.value(i, f, r)
	if err != nil {
		return "", err
	}
	if !fl.present || fl.isNull {
		if !required {
			return "", nil
		}
		return "", &Error{Class: Missing, Field: src.field, Reason: src.name + " is missing"}
	}
	if err := stringField(src, fl); err != nil {
		return "", err
	}
	if err := rowkey.ValidateID(src.name, fl.s); err != nil {
		return "", &Error{Class: BadID, Field: src.field, Reason: err.Error()}
	}
	return fl.s, nil
}

// base picks the time the TTL counts from. A time that is present means
// what it says: one before 1970 makes an event long expired, which the
// caller skips.
func (d Decoder) base(m *Mapping, f *fields, r *Source) (time.Time, bool, error) {
	src := &m.src[fieldTime]
	fl, err := m.value(fieldTime, f, r)
	if err != nil {
		return time.Time{}, false, err
	}
	recordTime := r.Time
	if !fl.present || fl.isNull {
		if recordTime.IsZero() {
			return time.Time{}, false, &Error{Class: Missing, Field: src.field, Reason: src.name + " is missing and the Kafka record has no timestamp: there is no time to count the TTL from"}
		}
		if recordTime.After(latestBase) {
			return time.Time{}, false, tooLate(recordTime)
		}
		return recordTime, false, nil
	}
	t, err := m.eventTime(src, fl)
	if err != nil {
		return time.Time{}, false, err
	}
	// The record's timestamp is what bounds the event's own time (within
	// MaxClockSkew), and what the topic's message.timestamp.after.max.ms
	// holds producers to. A record without one (-1, legal in any batch and
	// exempt from that bound) leaves the time the producer's word alone:
	// taken, 2286 would buy 2286; clamped to the worker's clock, the cells
	// would depend on when the record was read. Neither: a dead letter.
	if recordTime.IsZero() {
		return time.Time{}, false, &Error{Class: NoRecordTime, Field: src.field, Reason: fmt.Sprintf(
			"%s %s comes in a Kafka record without a timestamp (-1): nothing bounds the time it claims, so it cannot count the TTL", src.name, t.UTC().Format(time.RFC3339Nano))}
	}
	if d.MaxClockSkew >= 0 && t.After(recordTime.Add(d.MaxClockSkew)) {
		if recordTime.After(latestBase) {
			return time.Time{}, false, tooLate(recordTime)
		}
		return recordTime, true, nil
	}
	if t.After(latestBase) {
		return time.Time{}, false, &Error{Class: BadTime, Field: src.field, Reason: fmt.Sprintf("%s %s is later than %s, the last time a row key can hold", src.name, quoted(fl), latestBase.Format(time.RFC3339Nano))}
	}
	return t, false, nil
}

// eventTime reads a present event time in the mapping's format.
func (m *Mapping) eventTime(src *source, fl *field) (time.Time, error) {
	switch fl.typed {
	case typedTime:
		// A timestamp type (Avro timestamp-millis or -micros, Protobuf's
		// google.protobuf.Timestamp) says what it is, whatever the format.
		return time.Unix(fl.num, int64(fl.nsec)).UTC(), nil
	case typedInt:
		if m.format == RFC3339 {
			return time.Time{}, &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s must be an RFC 3339 string or a timestamp (%s %s), not %s", src.name, m.formatLabel, m.format, fl.what())}
		}
		t, err := epochInt(fl.num, m.format)
		if err != "" {
			return time.Time{}, &Error{Class: BadTime, Field: src.field, Reason: fmt.Sprintf("%s %d is not %s", src.name, fl.num, err)}
		}
		return t, nil
	}
	// A JSON number is never an RFC 3339 time, a JSON string never an
	// epoch number but under auto; a header is text, read by the format.
	number := fl.kind == "number"
	if src.kind == fromJSON {
		switch {
		case m.format == RFC3339 || (m.format == Auto && !number):
			if err := stringField(src, fl); err != nil {
				return time.Time{}, err
			}
		case fl.kind != "number":
			want := "a JSON number"
			if fl.typeName != "" {
				want = "a number"
			}
			return time.Time{}, &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s must be %s of epoch %s (%s %s), not %s", src.name, want, unitName(m.format), m.formatLabel, m.format, fl.what())}
		}
	}
	format := m.format
	if format == Auto {
		format = RFC3339
		if number || looksNumeric(fl.s) {
			format = Auto
		}
	}
	if format == RFC3339 {
		t, ok := parseRFC3339(fl.s)
		if !ok {
			return time.Time{}, &Error{Class: BadTime, Field: src.field, Reason: fmt.Sprintf("%s %q is not an RFC 3339 time", src.name, fl.s)}
		}
		return t, nil
	}
	t, err := parseEpoch(fl.s, format)
	if err != "" {
		return time.Time{}, &Error{Class: BadTime, Field: src.field, Reason: fmt.Sprintf("%s %s is not %s", src.name, quoted(fl), err)}
	}
	return t, nil
}

// quoted shows a time's value as it was written: a JSON number bare,
// text quoted.
func quoted(fl *field) string {
	if fl.kind == "number" {
		return fl.s
	}
	return strconv.Quote(fl.s)
}

func unitName(f TimeFormat) string {
	switch f {
	case UnixSeconds:
		return "seconds"
	case UnixMillis:
		return "milliseconds"
	}
	return "seconds or milliseconds"
}

// stringField checks that a present JSON field is a string whose escapes
// all decode to characters.
func stringField(src *source, f *field) error {
	if f.kind != "" {
		return &Error{Class: WrongType, Field: src.field, Reason: fmt.Sprintf("%s must be a string, not %s", src.name, f.what())}
	}
	if f.escape != "" {
		return &Error{Class: Ambiguous, Field: src.field, Reason: fmt.Sprintf("%s %s escapes a lone UTF-16 surrogate, which is not a character: readers turn it into U+FFFD, so distinct values would read the same", src.name, f.escape)}
	}
	return nil
}

// alias returns b as a string sharing its memory: record keys and header
// values never change while the event is in use.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// tooLate refuses a record timestamp past what a row key can hold.
func tooLate(recordTime time.Time) error {
	return &Error{Class: BadTime, Reason: fmt.Sprintf("the record timestamp %s is later than %s, the last time a row key can hold",
		recordTime.UTC().Format(time.RFC3339Nano), latestBase.Format(time.RFC3339Nano))}
}

// invalidJSON describes why value does not parse, on the error path only.
func invalidJSON(value []byte) error {
	var raw json.RawMessage
	err := json.Unmarshal(value, &raw)
	if err == nil {
		err = fmt.Errorf("invalid JSON")
	}
	return &Error{Class: NotJSON, Reason: fmt.Sprintf("not a JSON object: %v", err)}
}
