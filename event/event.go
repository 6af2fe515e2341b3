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
	// record timestamp, clamped to the processing time when it lies too far
	// in the future.
	Base time.Time
	// Clamped is set when occurred_at was more than MaxClockSkew ahead.
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
	// MaxClockSkew is how far in the future occurred_at may lie before it is
	// clamped to the processing time: a producer's clock that runs ahead must
	// not stretch a tenant's retention.
	MaxClockSkew time.Duration
}

// Decode validates value and returns its event. recordTime is the Kafka
// record timestamp, used when occurred_at is absent; now is the processing
// time.
func (d Decoder) Decode(value []byte, recordTime, now time.Time) (Event, error) {
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
	if ev.ID, err = required("event_id", f.eventID); err != nil {
		return Event{}, err
	}
	if ev.Tenant, err = required("tenant_id", f.tenantID); err != nil {
		return Event{}, err
	}
	if f.userID.present && !f.userID.isNull {
		if f.userID.kind != "" {
			return Event{}, typeError("user_id", f.userID.kind)
		}
		if err := rowkey.ValidateID("user_id", f.userID.s); err != nil {
			return Event{}, &Error{Field: "user_id", Reason: err.Error()}
		}
		ev.User = f.userID.s
	}
	ev.Base = recordTime
	if f.occurredAt.present && !f.occurredAt.isNull {
		if f.occurredAt.kind != "" {
			return Event{}, typeError("occurred_at", f.occurredAt.kind)
		}
		t, err := time.Parse(time.RFC3339Nano, f.occurredAt.s)
		if err != nil {
			return Event{}, &Error{Field: "occurred_at", Reason: fmt.Sprintf("occurred_at %q is not an RFC 3339 time", f.occurredAt.s)}
		}
		ev.Base = t
	}
	if ev.Base.IsZero() {
		// No occurred_at and a record without a timestamp (pre-0.10 message
		// format): the processing time is the only time there is.
		ev.Base = now
	}
	if d.MaxClockSkew >= 0 && ev.Base.After(now.Add(d.MaxClockSkew)) {
		ev.Base, ev.Clamped = now, true
	}
	return ev, nil
}

func required(name string, f field) (string, error) {
	switch {
	case !f.present || f.isNull:
		return "", &Error{Field: name, Reason: name + " is missing"}
	case f.kind != "":
		return "", typeError(name, f.kind)
	}
	if err := rowkey.ValidateID(name, f.s); err != nil {
		return "", &Error{Field: name, Reason: err.Error()}
	}
	return f.s, nil
}

func typeError(name, kind string) error {
	return &Error{Field: name, Reason: fmt.Sprintf("%s must be a string, not a JSON %s", name, kind)}
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
