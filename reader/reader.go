// Package reader returns the events of a tenant that have not expired.
//
// Bigtable's GC is lazy: expired cells stay readable for up to a week. A
// reader must therefore filter by timestamp, from the earliest timestamp
// still live, and it must derive that bound from the same rule the writer
// used. Both come from expiry.Policy: ReadFrom for the filter, ExpiryOf for
// each cell's expiry.
package reader

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
)

// Reader reads one family of one table.
type Reader struct {
	table  Rows
	family string
	policy *expiry.Policy
	now    func() time.Time
	values ValueDecoder
}

// ValueDecoder decodes a stored value into JSON: the worker's
// schema/registry decodes values framed for a schema registry (Avro,
// Protobuf, JSON Schema). An *event.Error is the value's fault (not framed,
// an unknown schema id, bytes that do not decode): the event is returned
// all the same, with the reason. Any other error (the registry cannot be
// reached) ends the read.
type ValueDecoder interface {
	DecodeValue(ctx context.Context, value []byte) (json.RawMessage, error)
}

// DecodeValues makes r decode the value of each event it returns with d,
// into Event.Decoded, or Event.DecodeError when it cannot be.
func (r *Reader) DecodeValues(d ValueDecoder) *Reader {
	r.values = d
	return r
}

// Rows is the table a Reader reads: a *bigtable.Table, or one whose reads
// are waits of a command that bounds them (internal/waitfor/btwait).
type Rows interface {
	ReadRows(ctx context.Context, arg bigtable.RowSet, f func(bigtable.Row) bool, opts ...bigtable.ReadOption) error
}

// New returns a Reader for the family written under policy.
func New(table Rows, family string, policy *expiry.Policy) *Reader {
	return &Reader{table: table, family: family, policy: policy, now: time.Now}
}

// Query selects events. Tenant is required.
type Query struct {
	Tenant string
	// User narrows the read to one user's rows, a single key range.
	User string
	// Since and Until bound the event time (the TTL base): [Since, Until).
	// Zero means unbounded.
	Since, Until time.Time
	// Limit stops after this many events; 0 means no limit.
	Limit int
	// IncludeExpired returns cells GC has not collected yet too, marked
	// Expired: for debugging, never for serving.
	IncludeExpired bool
}

// Event is one event as stored.
type Event struct {
	Key       string
	Tenant    string
	User      string
	EventID   string
	EventTime time.Time // the TTL base, from the row key
	// Value is the event cell: the value as produced.
	Value []byte
	// Decoded is Value decoded into JSON, when the Reader decodes values
	// (DecodeValues); DecodeError says why it could not be, Decoded then
	// nil.
	Decoded     json.RawMessage
	DecodeError *event.Error
	// Timestamp is the cell timestamp in microseconds.
	Timestamp int64
	// Expiry is when the event stops being readable.
	Expiry time.Time
	// WrittenAt is the real write time, zero when not recorded.
	WrittenAt time.Time
	Expired   bool
	// TTL is how long the event lives: Expiry - EventTime. TTLSource says
	// where it came from: "event" when the event gave its own (--ttl-from;
	// RequestedTTL is what it asked for, before its tenant's bounds
	// clamped it), "tenant" otherwise, "unknown" for a ttl cell that
	// cannot be read.
	TTL          time.Duration
	TTLSource    string
	RequestedTTL time.Duration
}

// Where an event's TTL came from. TTLUnknown: the row has a ttl cell that
// cannot be read (its TTL, Expiry - EventTime, is still what the cell
// lives).
const (
	TTLFromTenant = "tenant"
	TTLFromEvent  = "event"
	TTLUnknown    = "unknown"
)

// Filter is the read filter that hides expired cells at now: the event,
// written_at and ttl columns of the family, timestamps from policy.ReadFrom(now)
// with no upper bound (shifted timestamps lie in the future), and the
// latest version of each. Readers in other code should build the same.
func Filter(policy *expiry.Policy, family string, now time.Time) bigtable.Filter {
	return bigtable.ChainFilters(
		columnsFilter(family),
		bigtable.TimestampRangeFilterMicros(bigtable.Timestamp(policy.ReadFrom(now)), 0),
		bigtable.LatestNFilter(1),
	)
}

func columnsFilter(family string) bigtable.Filter {
	return bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+regexp.QuoteMeta(family)+"$"),
		bigtable.ColumnFilter("^("+rowkey.ColumnEvent+"|"+rowkey.ColumnWrittenAt+"|"+rowkey.ColumnTTL+")$"),
	)
}

// Read calls fn for each event matching q, in row key order, until fn
// returns false. Expiry is judged at one instant, taken when the read starts.
func (r *Reader) Read(ctx context.Context, q Query, fn func(Event) bool) error {
	if err := rowkey.ValidateID("tenant", q.Tenant); err != nil {
		return err
	}
	if q.User != "" {
		if err := rowkey.ValidateID("user", q.User); err != nil {
			return err
		}
	}
	now := r.now()
	var filter bigtable.Filter
	if q.IncludeExpired {
		filter = bigtable.ChainFilters(columnsFilter(r.family), bigtable.LatestNFilter(1))
	} else {
		filter = Filter(r.policy, r.family, now)
	}
	var rr bigtable.RowSet = bigtable.PrefixRange(rowkey.TenantPrefix(q.Tenant))
	if q.User != "" {
		prefix := rowkey.UserPrefix(q.Tenant, q.User)
		rr = bigtable.PrefixRange(prefix)
		if !q.Since.IsZero() || !q.Until.IsZero() {
			start := prefix
			if !q.Since.IsZero() {
				start = rowkey.UserTimeKey(q.Tenant, q.User, q.Since.UnixMilli())
			}
			limit := rowkey.PrefixEnd(prefix)
			if !q.Until.IsZero() {
				limit = rowkey.UserTimeKey(q.Tenant, q.User, q.Until.UnixMilli())
			}
			rr = bigtable.NewRange(start, limit)
		}
	}
	n := 0
	var decodeErr error
	err := r.table.ReadRows(ctx, rr, func(row bigtable.Row) bool {
		ev, ok, err := r.decode(row, now)
		if err != nil {
			decodeErr = err
			return false
		}
		if !ok || (!q.Since.IsZero() && ev.EventTime.Before(q.Since)) || (!q.Until.IsZero() && !ev.EventTime.Before(q.Until)) {
			return true
		}
		if r.values != nil {
			if ev.Decoded, err = r.values.DecodeValue(ctx, ev.Value); err != nil {
				ev.Decoded = nil
				if !errors.As(err, &ev.DecodeError) {
					decodeErr = fmt.Errorf("decode the value of row %q: %w", ev.Key, err)
					return false
				}
			}
		}
		n++
		if !fn(ev) {
			return false
		}
		return q.Limit == 0 || n < q.Limit
	}, bigtable.RowFilter(filter))
	if err != nil {
		return fmt.Errorf("read tenant %s: %w", q.Tenant, err)
	}
	return decodeErr
}

func (r *Reader) decode(row bigtable.Row, now time.Time) (Event, bool, error) {
	ev := Event{Key: row.Key(), TTLSource: TTLFromTenant}
	found := false
	for _, it := range row[r.family] {
		switch it.Column {
		case r.family + ":" + rowkey.ColumnEvent:
			ev.Value, ev.Timestamp, found = it.Value, int64(it.Timestamp), true
		case r.family + ":" + rowkey.ColumnWrittenAt:
			if len(it.Value) == 8 {
				ev.WrittenAt = time.UnixMicro(int64(binary.BigEndian.Uint64(it.Value))).UTC()
			}
		case r.family + ":" + rowkey.ColumnTTL:
			if _, requested, err := rowkey.ParseTTL(it.Value); err == nil {
				ev.TTLSource, ev.RequestedTTL = TTLFromEvent, requested
			} else {
				ev.TTLSource = TTLUnknown
			}
		}
	}
	if !found {
		// written_at alone: the event cell was collected first. Not an event.
		return Event{}, false, nil
	}
	parts, err := rowkey.Parse(ev.Key)
	if err != nil {
		return Event{}, false, fmt.Errorf("row %q was not written by cellttl: %w", ev.Key, err)
	}
	ev.Tenant, ev.User, ev.EventID = parts.Tenant, parts.User, parts.EventID
	ev.EventTime = time.UnixMilli(parts.Millis).UTC()
	ev.Expiry = r.policy.ExpiryOf(ev.Timestamp)
	ev.TTL = ev.Expiry.Sub(ev.EventTime)
	ev.Expired = expiry.Expired(ev.Expiry, now)
	return ev, true, nil
}
