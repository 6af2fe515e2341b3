package pipeline

import (
	"fmt"
	"time"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/tenants"
)

// StrictLatest is the latest time an event may carry under
// --strict-retention when its record was first seen at seen (the worker's
// clock when it processes the record; for a redrive, the earlier of its
// clock and its letter's time): seen + --max-clock-skew, the bound a
// topic's message.timestamp.after.max.ms must keep too.
func StrictLatest(seen time.Time, skew time.Duration) time.Time {
	return seen.Add(skew)
}

// ahead says, under --strict-retention (latest not zero), why an event's
// time lies past latest: its record's timestamp, or its own time, which
// the decoder keeps within --max-clock-skew of the record's and may
// therefore still lie that much past latest. field names the event's
// field at fault ("" for the record timestamp). nil when neither does.
//
// Such an event is dead-lettered (TimeAhead), not clamped to the clock: a
// clamp would make its cells depend on when it was processed, and a
// redelivery (a rebalance, a restart before the commit, a replay) would
// write another timestamp, a second cell version, and another row, since
// the row key holds the time. Dead-lettered, every cell the worker writes
// stays a function of its record, and the clock decides only whether it is
// written, as it decides whether an event has expired. A record that waits
// in the topic until its time has come is written as stamped: the time it
// buys is bounded by how long the topic keeps it.
func ahead(d *event.Decoder, msg *ingest.Message, ev *event.Event, latest time.Time) (field string, err error) {
	if latest.IsZero() {
		return "", nil
	}
	const why = "the latest --strict-retention allows (the worker's clock + --max-clock-skew): a time stamped ahead would buy retention"
	if msg.Time.After(latest) {
		return "", fmt.Errorf("the record timestamp %s is %s later than %s, %s",
			msg.Time.UTC().Format(time.RFC3339Nano), duration.Format(msg.Time.Sub(latest).Round(time.Millisecond)), latest.UTC().Format(time.RFC3339Nano), why)
	}
	if ev.Base.After(latest) {
		field = d.Mapping.TimeField()
		return field, fmt.Errorf("the event time %s (%s) is %s later than %s, %s",
			ev.Base.UTC().Format(time.RFC3339Nano), field, duration.Format(ev.Base.Sub(latest).Round(time.Millisecond)), latest.UTC().Format(time.RFC3339Nano), why)
	}
	return "", nil
}

// aheadKeep is the latest a TimeAhead event's letter may keep its payload.
// Its time is the producer's word: the event happened no later than its
// record was seen, so its life counts from the earlier of the record's
// time and now, for as long as it may live: its own TTL within its
// tenant's bounds, else its tenant's, and no longer than the unlisted
// bound when its tenant is not listed.
func (d *Decision) aheadKeep(cfg *tenants.Config, unlisted time.Duration, recordTime, now time.Time) time.Time {
	from := now
	if !recordTime.IsZero() && recordTime.Before(now) {
		from = recordTime
	}
	ev := &d.Event
	ttl := cfg.Policy.TTL(ev.Tenant)
	if ev.HasTTL {
		ttl, _ = cfg.Policy.EventTTL(ev.Tenant, ev.TTL)
	}
	keep := from.Add(ttl)
	if !d.Listed {
		keep = earliest(keep, from.Add(unlisted))
	}
	return keep
}
