package forget

// How long a ledger record must live, and what its mark covers: the
// stores forget cannot erase from, and the end offsets it reads so that a
// record stays in force while a record it covers can still be read.

import (
	"context"
	"fmt"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/retention"
)

// unreachable lists the stores forget cannot erase from, with the longest
// a copy can remain there from now, and returns how long a ledger record
// must live (retention.LedgerRecordLife).
func unreachable(f retention.Facts, backups time.Duration, backupsDecidedBy string, longestTTL time.Duration) ([]retention.StoreLife, time.Duration) {
	var out []retention.StoreLife
	add := func(store string, k retention.TopicKeep) {
		line := retention.StoreLife{Store: store + " " + k.Topic, DecidedBy: k.Settings}
		switch {
		case k.Missing:
			line.Longest, line.DecidedBy = "0", "the topic does not exist"
		case k.Unknown != "":
			line.Longest, line.DecidedBy = "unknown", k.Unknown
		case k.Keeps == retention.Forever:
			line.Longest = "forever"
		default:
			line.Longest = duration.Format(k.Keeps)
		}
		out = append(out, line)
	}
	add("input topic", f.Input)
	for _, d := range f.DeadLetters {
		add("dead-letter topic", d)
	}
	if backups > 0 {
		out = append(out, retention.StoreLife{Store: "backups of the table", Longest: duration.Format(backups), DecidedBy: backupsDecidedBy})
	}
	return out, retention.LedgerRecordLife(f, backups, longestTTL)
}

// recordExpires is when a record of an erasure up to upTo, recorded at now,
// expires: keep (retention.LedgerRecordLife) after now, and no sooner than the tenant's
// longest TTL after upTo, which lies --max-clock-skew after now: an event
// at erased_up_to lives that long, and until then a worker could still
// write it. Zero (never) when keep is negative.
//
// Both are of forget's clock, which may lie erasure.ClockTolerance behind
// the brokers' and Bigtable's that count the copies' keep: the record
// lives that much longer, or it would expire before what it covers.
func recordExpires(now, upTo time.Time, keep, longestTTL time.Duration) time.Time {
	if keep < 0 {
		return time.Time{}
	}
	exp := now.Add(keep)
	if last := upTo.Add(longestTTL); last.After(exp) {
		exp = last
	}
	return exp.Add(erasure.ClockTolerance)
}

// mark reads the input topic's end offsets once every user is recorded,
// and records each erasure again with them (the same cells, and the
// mark's): whatever was appended before the first record is below them.
// Read before the records, they would miss what was appended between the
// read and the write. A failure fails forget before any row is deleted:
// running it again records the users again.
func (e *eraser) mark(ctx context.Context) error {
	r := e.r
	if r.DryRun || e.recorded() == 0 || !r.Before.IsZero() || r.EndOffsets == nil {
		e.rc.Bound = bound(e.rc.ErasedUpTo, nil, r.Before)
		return nil
	}
	m, err := e.endOffsets(ctx)
	if err != nil {
		return fmt.Errorf("read the input topic's end offsets, which erase the records appended before the erasure whatever time they carry "+
			"(the users are recorded by time; run the same forget again): %w", err)
	}
	for i := range e.rc.Users {
		ur := &e.rc.Users[i]
		if ur.Record == nil {
			continue
		}
		rec := *ur.Record
		rec.Below = m
		if err := e.store.Put(ctx, rec); err != nil {
			return fmt.Errorf("record the end offsets of the erasure: %w", err)
		}
		ur.Record = &rec
	}
	e.rc.ErasedBelow, e.rc.Bound = m, bound(e.rc.ErasedUpTo, m, r.Before)
	return nil
}

// endOffsets reads the mark: the input topic's end offsets, between two
// reads of its id, which must agree: offsets read across a topic deleted
// and created again would be of neither incarnation. (The first read of
// the offsets only names the topic.)
func (e *eraser) endOffsets(ctx context.Context) (*erasure.Mark, error) {
	r := e.r
	id := func(topic string) (string, error) {
		if r.TopicID == nil {
			return "", nil
		}
		return r.TopicID(ctx, topic)
	}
	topic, ends, err := r.EndOffsets(ctx)
	if err != nil {
		return nil, err
	}
	before, err := id(topic)
	if err != nil {
		return nil, err
	}
	if r.TopicID != nil {
		if topic, ends, err = r.EndOffsets(ctx); err != nil {
			return nil, err
		}
	}
	after, err := id(topic)
	if err != nil {
		return nil, err
	}
	if before != after {
		return nil, fmt.Errorf("topic %s was created again while its offsets were read (id %s, then %s)", topic, before, after)
	}
	return &erasure.Mark{Topic: topic, TopicID: after, Ends: ends}, nil
}

// bound says what an erasure covers, for the receipt.
func bound(upTo time.Time, m *erasure.Mark, before time.Time) string {
	at := upTo.Format(time.RFC3339Nano)
	switch {
	case !before.IsZero():
		return "events whose time is at or before " + at + " (--before: by time alone)"
	case m == nil:
		return "events whose time is at or before " + at + ", by time alone: events appended before the erasure but stamped later are not covered"
	}
	topic := m.Topic
	if m.TopicID != "" {
		topic += " (topic id " + m.TopicID + ")"
	}
	return fmt.Sprintf("events whose time is at or before %s, and every event appended to %s before the erasure was recorded, whatever time it carries (offsets below %v, by partition)",
		at, topic, m.Ends)
}
