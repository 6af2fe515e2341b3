// Package event decodes and validates click events, the JSON objects carried
// in Kafka message values. It knows nothing of Kafka or Bigtable: bytes and
// times in, an Event or an *Error naming the bad field out.
package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/rowkey"
)

// Event is a valid click event.
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

// wire is the JSON shape; pointers tell absent fields from empty ones.
// Unknown fields are allowed: the value is stored as received.
type wire struct {
	EventID    *string `json:"event_id"`
	TenantID   *string `json:"tenant_id"`
	UserID     *string `json:"user_id"`
	OccurredAt *string `json:"occurred_at"`
}

// Decode validates value and returns its event. recordTime is the Kafka
// record timestamp, used when occurred_at is absent; now is the processing
// time.
func (d Decoder) Decode(value []byte, recordTime, now time.Time) (Event, error) {
	if d.MaxBytes > 0 && len(value) > d.MaxBytes {
		return Event{}, &Error{Reason: fmt.Sprintf("value is %d bytes, more than the limit of %d", len(value), d.MaxBytes)}
	}
	var w wire
	if err := json.Unmarshal(value, &w); err != nil {
		return Event{}, jsonError(err)
	}
	var ev Event
	var err error
	if ev.ID, err = required("event_id", w.EventID); err != nil {
		return Event{}, err
	}
	if ev.Tenant, err = required("tenant_id", w.TenantID); err != nil {
		return Event{}, err
	}
	if w.UserID != nil {
		if err := rowkey.ValidateID("user_id", *w.UserID); err != nil {
			return Event{}, &Error{Field: "user_id", Reason: err.Error()}
		}
		ev.User = *w.UserID
	}
	ev.Base = recordTime
	if w.OccurredAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *w.OccurredAt)
		if err != nil {
			return Event{}, &Error{Field: "occurred_at", Reason: fmt.Sprintf("occurred_at %q is not an RFC 3339 time", *w.OccurredAt)}
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

func required(field string, v *string) (string, error) {
	if v == nil {
		return "", &Error{Field: field, Reason: field + " is missing"}
	}
	if err := rowkey.ValidateID(field, *v); err != nil {
		return "", &Error{Field: field, Reason: err.Error()}
	}
	return *v, nil
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return &Error{Reason: fmt.Sprintf("value is a JSON %s, not an object", te.Value)}
		}
		return &Error{Field: te.Field, Reason: fmt.Sprintf("%s must be a string, not a JSON %s", te.Field, te.Value)}
	}
	return &Error{Reason: fmt.Sprintf("not a JSON object: %v", err)}
}
