// Package event decodes and validates click events, the JSON objects carried
// in Kafka message values. It knows nothing of Kafka or Bigtable: bytes and
// times in, an Event or an *Error naming the bad field out.
package event

import (
	"encoding/json"
	"fmt"
	"time"

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
}

// Error says why an event was rejected. Field is the JSON field at fault, or
// "" when the value as a whole is (not JSON, too large); Reason is a
// sentence that names the field and quotes the value.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// Decoder holds the limits events are checked against.
type Decoder struct {
	// MaxBytes rejects larger values before they are parsed.
	MaxBytes int
	// MaxClockSkew is how far occurred_at may lie after the record
	// timestamp before the record timestamp is taken instead: a producer
	// whose clock runs ahead must not stretch a tenant's retention.
	MaxClockSkew time.Duration
}

// latestBase is the last millisecond the 13 digits of a row key's time can
// hold (2286-11-20T17:46:39.999Z).
var latestBase = time.UnixMilli(rowkey.MaxMillis).UTC()

// Decode validates value and returns its event. recordTime is the Kafka
// record timestamp, the zero Time when the record has none. The result
// depends on these two alone.
func (d Decoder) Decode(value []byte, recordTime time.Time) (Event, error) {
	if d.MaxBytes > 0 && len(value) > d.MaxBytes {
		return Event{}, &Error{Reason: fmt.Sprintf("value is %d bytes, more than the limit of %d", len(value), d.MaxBytes)}
	}
	f, err := parse(value)
	if err == errSyntax {
		return Event{}, invalidJSON(value)
	}
	if err != nil {
		return Event{}, err
	}
	var ev Event
	if ev.ID, err = required("event_id", &f.eventID); err != nil {
		return Event{}, err
	}
	if ev.Tenant, err = required("tenant_id", &f.tenantID); err != nil {
		return Event{}, err
	}
	if f.userID.present && !f.userID.isNull {
		if err := stringField("user_id", &f.userID); err != nil {
			return Event{}, err
		}
		if err := rowkey.ValidateID("user_id", f.userID.s); err != nil {
			return Event{}, &Error{Field: "user_id", Reason: err.Error()}
		}
		ev.User = f.userID.s
	}
	if ev.Base, ev.Clamped, err = d.base(&f.occurredAt, recordTime); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// base picks the time the TTL counts from. A time that is present means
// what it says: one before 1970 makes an event long expired, which the
// caller skips.
func (d Decoder) base(occurredAt *field, recordTime time.Time) (time.Time, bool, error) {
	if !occurredAt.present || occurredAt.isNull {
		if recordTime.IsZero() {
			return time.Time{}, false, &Error{Field: "occurred_at", Reason: "occurred_at is missing and the Kafka record has no timestamp: there is no time to count the TTL from"}
		}
		if recordTime.After(latestBase) {
			return time.Time{}, false, tooLate(recordTime)
		}
		return recordTime, false, nil
	}
	if err := stringField("occurred_at", occurredAt); err != nil {
		return time.Time{}, false, err
	}
	t, ok := parseRFC3339(occurredAt.s)
	if !ok {
		return time.Time{}, false, &Error{Field: "occurred_at", Reason: fmt.Sprintf("occurred_at %q is not an RFC 3339 time", occurredAt.s)}
	}
	if !recordTime.IsZero() && d.MaxClockSkew >= 0 && t.After(recordTime.Add(d.MaxClockSkew)) {
		if recordTime.After(latestBase) {
			return time.Time{}, false, tooLate(recordTime)
		}
		return recordTime, true, nil
	}
	if t.After(latestBase) {
		return time.Time{}, false, &Error{Field: "occurred_at", Reason: fmt.Sprintf("occurred_at %q is later than %s, the last time a row key can hold", occurredAt.s, latestBase.Format(time.RFC3339Nano))}
	}
	return t, false, nil
}

func required(name string, f *field) (string, error) {
	if !f.present || f.isNull {
		return "", &Error{Field: name, Reason: name + " is missing"}
	}
	if err := stringField(name, f); err != nil {
		return "", err
	}
	if err := rowkey.ValidateID(name, f.s); err != nil {
		return "", &Error{Field: name, Reason: err.Error()}
	}
	return f.s, nil
}

// stringField checks that a present field is a string whose escapes all
// decode to characters.
func stringField(name string, f *field) error {
	if f.kind != "" {
		return &Error{Field: name, Reason: fmt.Sprintf("%s must be a string, not a JSON %s", name, f.kind)}
	}
	if f.escape != "" {
		return &Error{Field: name, Reason: fmt.Sprintf("%s %s escapes a lone UTF-16 surrogate, which is not a character: readers turn it into U+FFFD, so distinct values would read the same", name, f.escape)}
	}
	return nil
}

// tooLate refuses a record timestamp past what a row key can hold.
func tooLate(recordTime time.Time) error {
	return &Error{Reason: fmt.Sprintf("the record timestamp %s is later than %s, the last time a row key can hold",
		recordTime.UTC().Format(time.RFC3339Nano), latestBase.Format(time.RFC3339Nano))}
}

// invalidJSON describes why value does not parse, on the error path only.
func invalidJSON(value []byte) error {
	var raw json.RawMessage
	err := json.Unmarshal(value, &raw)
	if err == nil {
		err = fmt.Errorf("invalid JSON")
	}
	return &Error{Reason: fmt.Sprintf("not a JSON object: %v", err)}
}
