package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Fate is what becomes of a record.
type Fate uint8

const (
	// Write: Decision.Row is to be written.
	Write Fate = iota
	// Expired: the event expired before it was processed; skipped.
	Expired
	// Rejected: the record is not a valid event (Decision.Err says why).
	Rejected
	// UnlistedDeadLetter: its tenant is not listed, and unlisted_tenants
	// is dead-letter.
	UnlistedDeadLetter
	// Erased: the erasure ledger covers the event's user and time; never
	// written, never dead-lettered.
	Erased
	// TimeAhead: under --strict-retention, the record's or the event's
	// time lies past the latest Decide was given (see ahead.go).
	TimeAhead
	// Held: the record could not be read for a reason outside it (the
	// schema registry unreachable while the worker stopped): neither
	// written nor dead-lettered nor settled, it is read again by whoever
	// reads its partition next.
	Held
	// Lookup: the ledger must look the event's user up before it can say
	// whether the user is erased (erasure.Ledger.Known); the record waits
	// for erasure.Ledger.Resolve, then is decided again.
	Lookup
)

// Decision is what the worker makes of one record: a pure function of the
// record and the tenants config, except that the clock decides whether a
// row has already expired. The worker and worker redrive both decide
// through it, so a re-driven event gets the cells it would have got.
type Decision struct {
	Fate  Fate
	Event event.Event
	// Listed is whether the tenants file lists the event's tenant.
	Listed bool
	// TTL is the event's retention: its own (Event.HasTTL) within its
	// tenant's bounds, else its tenant's. TTLClamp says whether the bounds
	// clamped its own.
	TTL      time.Duration
	TTLClamp expiry.Clamp
	Cell     expiry.Cell
	// Row is the row to write (Write).
	Row sink.Row
	// Err, Class and Field say why a record is rejected (Rejected,
	// UnlistedDeadLetter): Class is a cellttl_dead_letters_total reason.
	Err          error
	Class, Field string
}

// Decide decodes msg with d and gives it its cells under cfg, unless the
// ledger (nil: none) erased its user up to its time, or its tenant left (the
// ledger's offboarding, or the tenants file's). The ledger is asked
// before the tenant's policy: an erased user's event of an unlisted tenant
// is not dead-lettered either (a letter is a copy of the payload). latest,
// when not zero, is the latest time an event may carry (--strict-retention,
// see StrictLatest): a later one is TimeAhead.
func Decide(d *event.Decoder, cfg *tenants.Config, ledger *erasure.Ledger, msg *ingest.Message, now, latest time.Time) Decision {
	rec := record(d.Mapping, msg)
	ev, err := d.DecodeRecord(&rec)
	at := erasure.Position{Topic: msg.Topic, TopicID: msg.TopicID, Partition: msg.Partition, Offset: msg.Offset}
	if err != nil && d.Values != nil {
		// A value reader's error that is no *event.Error is not the
		// record's fault: never a dead letter.
		if _, ok := err.(*event.Error); !ok {
			return Decision{Fate: Held, Err: err}
		}
	}
	if cfg.Offboarded[ev.Tenant] {
		// The tenant has left: nothing of it is written or dead-lettered,
		// whatever the ledger holds yet.
		return Decision{Fate: Erased, Event: ev}
	}
	if err != nil {
		// An erased user's event whose time or own TTL cannot be read: its
		// letter would be a copy of the user's data. Erased by its time
		// when that was read (a TTL error), else by the record's.
		t := msg.Time
		if !ev.Base.IsZero() {
			t = ev.Base
		}
		if !ledger.Known(ev.Tenant, ev.User) {
			return Decision{Fate: Lookup, Event: ev}
		}
		if ledger.Erased(ev.Tenant, ev.User, t.UnixMilli(), at) {
			_, listed := cfg.Policy.Tenants[ev.Tenant]
			return Decision{Fate: Erased, Event: ev, Listed: listed}
		}
		// The ids of an invalid event are the producer's word alone: its
		// tenant is counted only when listed (route), and bounds its letter
		// only when its time was read too, as when only its own TTL could
		// not be (see KeepUntil). They are kept, as far as they were read,
		// for the ledger to judge its letter by (Subject).
		dec := Decision{Fate: Rejected, Err: err, Class: string(event.NotJSON), Event: ev}
		var evErr *event.Error
		if errors.As(err, &evErr) {
			dec.Field, dec.Class = evErr.Field, string(evErr.Class)
		}
		return dec
	}
	pol := cfg.Policy
	ttl, listed := pol.Tenants[ev.Tenant]
	dec := Decision{Event: ev, Listed: listed}
	if !ledger.Known(ev.Tenant, ev.User) {
		dec.Fate = Lookup
		return dec
	}
	if ledger.Erased(ev.Tenant, ev.User, ev.Base.UnixMilli(), at) {
		dec.Fate = Erased
		return dec
	}
	if dec.Field, dec.Err = ahead(d, msg, &ev, latest); dec.Err != nil {
		dec.Fate, dec.Class = TimeAhead, reasonTimeAhead
		return dec
	}
	if !listed {
		if cfg.Unlisted == tenants.UnlistedDeadLetter {
			dec.Fate, dec.Class, dec.Field = UnlistedDeadLetter, reasonUnlisted, d.Mapping.TenantField()
			dec.Err = fmt.Errorf("tenant %q is not listed in tenants.yaml, whose unlisted_tenants is dead-letter", ev.Tenant)
			return dec
		}
		ttl = pol.DefaultTTL
	}
	if ev.HasTTL {
		ttl, dec.TTLClamp = pol.EventTTL(ev.Tenant, ev.TTL)
	}
	dec.TTL = ttl
	dec.Cell = pol.CellTTL(ttl, ev.Base)
	if expiry.Expired(dec.Cell.Expiry, now) {
		dec.Fate = Expired
		return dec
	}
	dec.Row = sink.Row{Key: rowkey.Key(ev.Tenant, ev.User, ev.ID, ev.Base.UnixMilli()), Timestamp: dec.Cell.Timestamp, Value: msg.Value,
		WrittenAt: pol.RecordRealTimestamp, Gen: ledger.Generation(), Source: sink.Source{Topic: msg.Topic, TopicID: msg.TopicID, Partition: msg.Partition, Offset: msg.Offset}}
	if ev.HasTTL {
		dec.Row.TTL = sink.TTL{Effective: ttl, Requested: ev.TTL, Own: true}
	}
	return dec
}

// Subject is whose data a dead letter of the record would copy, for the
// ledger to judge when the letter is produced: a rejected record's ids as
// far as they were read (its user counts as read only when it was), at
// its event's time or, unread, its record's.
func (d *Decision) Subject(msg *ingest.Message) erasure.Subject {
	ev := &d.Event
	s := erasure.Subject{Tenant: ev.Tenant, User: ev.User, UserRead: d.Fate != Rejected || ev.User != "",
		At: erasure.Position{Topic: msg.Topic, TopicID: msg.TopicID, Partition: msg.Partition, Offset: msg.Offset}}
	if t := ev.Base; !t.IsZero() {
		s.Millis = t.UnixMilli()
	} else {
		s.Millis = msg.Time.UnixMilli()
	}
	return s
}

// KeepUntil is the latest a dead letter of the record may keep its
// payload: never past what the record's event may live. unlistedTTL is
// --dlq-unlisted-retention (0: default_ttl); recordTime is the record's
// time.
//
//   - Rejected: no tenant to take a TTL from (the tenant field of an
//     invalid event is not to be trusted, and may be missing): no longer
//     than the shortest TTL of the file and the bound for unlisted tenants,
//     from the record's time (never later than now); when only its own TTL
//     could not be read, also no longer than its tenant's min_ttl from its
//     time.
//   - UnlistedDeadLetter: the unlisted bound from its time, and no longer
//     than the TTL it asked for, within the unlisted tenants' bounds.
//   - TimeAhead: as long as the event may live, counted from the record's
//     time or now, the earlier (see aheadKeep).
//   - Write, for a letter if the row is refused: the cell's expiry, and for
//     an unlisted tenant no later than the unlisted bound.
func (d *Decision) KeepUntil(cfg *tenants.Config, unlistedTTL time.Duration, recordTime, now time.Time) time.Time {
	ev := &d.Event
	unlisted := unlistedKeep(cfg, unlistedTTL)
	switch d.Fate {
	case Rejected:
		from := now
		if !recordTime.IsZero() && recordTime.Before(now) {
			from = recordTime
		}
		keep := from.Add(untrustedKeep(cfg, unlisted))
		if !ev.Base.IsZero() {
			// Its own TTL could not be read (its ids and time could): it
			// may have asked for as little as its tenant's min_ttl.
			b, _ := cfg.Policy.TenantBounds(ev.Tenant)
			keep = earliest(keep, ev.Base.Add(b.Min))
		}
		return keep
	case UnlistedDeadLetter:
		keep := ev.Base.Add(unlisted)
		if ev.HasTTL {
			ttl, _ := cfg.Policy.EventTTL(ev.Tenant, ev.TTL)
			keep = earliest(keep, ev.Base.Add(ttl))
		}
		return keep
	case TimeAhead:
		return d.aheadKeep(cfg, unlisted, recordTime, now)
	}
	keep := d.Cell.Expiry
	if !d.Listed {
		keep = earliest(keep, ev.Base.Add(unlisted))
	}
	return keep
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// untrustedKeep is how long the letter of an invalid event may keep its
// payload: its tenant cannot be trusted, so no longer than any tenant's,
// nor than unlisted, the unlisted tenants' bound.
func untrustedKeep(cfg *tenants.Config, unlisted time.Duration) time.Duration {
	if cfg.ShortestTTL > 0 {
		return min(unlisted, cfg.ShortestTTL)
	}
	return unlisted
}

// unlistedKeep is how long a dead letter of an unlisted tenant may keep its
// payload: unlistedTTL (--dlq-unlisted-retention), else default_ttl.
func unlistedKeep(cfg *tenants.Config, unlistedTTL time.Duration) time.Duration {
	if unlistedTTL > 0 {
		return unlistedTTL
	}
	return cfg.Policy.DefaultTTL
}
