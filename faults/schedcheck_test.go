package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/rowkey"
)

// The checker of a schedule: what the promises allow of each event, worked
// out here from the record alone (not by the worker's code), against what
// the table and the dead-letter topic hold after every step (a violation
// that a later step hides, a row a second forget deletes or a letter the
// broker drops, is seen all the same), and once more when the main group
// has read everything. Each violation is reported with the first step
// after which it was seen.
//
//  1. Erased stays erased: no row of a user's event that an erasure covers
//     once it has returned: every event the broker had acknowledged before
//     forget began (the schedule's own account, which the receipt's mark
//     must agree with), each before its --before time, and each at
//     or before the receipt's erased_up_to.
//  2. A tenant's data lives its TTL and no longer: each row's key and cell
//     follow the event's time as its record bounds it (its own time, or
//     its record's when it lies further ahead than the skew, and none
//     without a record timestamp), plus its tenant's TTL; one version.
//  3. No letter holds its payload past its event: placed + the topic's
//     keep, read from the broker (or a forged letter's stamp + the keep,
//     for the letters behind it), ends by the event's expiry (an unlisted
//     tenant's: default_ttl; an invalid event's: the shortest TTL of the
//     file in force, from its placement).
//  4. Nothing lost: an event of a long-lived tenant whose record the broker
//     keeps past the schedule (stamped 30 s ahead or more), erased by no
//     forget, and not expired, has its row.
//  5. An erasure recorded with --backup-retention keeps a record in force
//     that long after forget returned, whatever later forgets retire.
//  6. An offboarded tenant stays gone (schedoffboard_test.go).

// scheduleTTLs are the TTLs of scheduleTenants (newco's once listed).
var scheduleTTLs = map[string]time.Duration{"fast": 10 * time.Second, "acme": time.Hour, "globex": 72 * time.Hour, "newco": time.Hour}

// scheduleDefault is default_ttl, and so the unlisted letters' bound.
const scheduleDefault = 48 * time.Hour

// reloadWithin is how long after a tenants file is written the workers
// may still run the one before (they read it within a second): a letter
// placed meanwhile follows the file before.
const reloadWithin = 5 * time.Second

// shortestAt is the shortest TTL of a tenants file the workers may have
// run when they placed a letter at placed by their clock (seen by the
// checker at now): fast's, the longest it had from reloadWithin before the
// earliest time that may have been to the latest, within the hour of acme
// and newco. A letter placed under a longer TTL keeps its payload as that
// TTL allows, even once the TTL is shortened: docs/retention.md says so.
func (sc *schedule) shortestAt(placed, now time.Time) time.Duration {
	fast, from := scheduleTTLs["fast"], placed.Add(-workerSkewMax-reloadWithin)
	t := placed.Add(workerSkewMax)
	if now.Before(t) {
		t = now
	}
	longest := fast
	for _, e := range sc.fastEdits {
		switch {
		case e.at.After(t):
		case e.at.After(from):
			longest = max(longest, e.ttl)
		default:
			longest = e.ttl // in force at from; none before counts
		}
	}
	return min(longest, scheduleTTLs["acme"])
}

// base is the time an event's TTL counts from, as its record bounds it;
// ok is false when nothing bounds it (no time at all, or an own time in a
// record without one): the event must never be written.
func (e schedEvent) base() (time.Time, bool) {
	switch {
	case e.rec == -1:
		return time.Time{}, false
	case e.own.IsZero(), e.own.After(time.UnixMilli(e.rec).Add(scheduleSkew)):
		return time.UnixMilli(e.rec), true
	}
	return e.own.Truncate(time.Millisecond), true
}

// covered reports whether an erasure covers ev: by the schedule's own
// account (acknowledged before forget began; before --before), or by
// its receipt (below its mark, in the incarnation of the topic the mark
// is of; at or before erased_up_to).
func (f schedForget) covered(ev schedEvent, base time.Time) bool {
	if f.tenant != ev.tenant || f.user != ev.user {
		return false
	}
	if ev.seq >= f.acked && !f.expires.IsZero() && time.Now().After(f.expires) {
		// Appended after forget began, covered by its time alone: held
		// back while the record lives, and written by a replay once it
		// has ended, as docs/retention.md says (its copy can outlive the
		// record: a record stamped ahead beside it holds its segment).
		return false
	}
	switch {
	case f.before.IsZero() && ev.seq < f.acked:
		return true
	case !f.before.IsZero() && base.Before(f.before):
		return true
	case f.ends != nil && ev.incarnation == f.incarnation && ev.partition < len(f.ends) && ev.offset < f.ends[ev.partition]:
		return true
	}
	return !base.After(f.upTo)
}

// check replays the topic once more (whatever the schedule did, someone
// may read it all again), settles the main group, stops its worker,
// observes once more, and reports every violation seen.
//
// The last replay comes after every ledger record of one erased user has
// ended, when that is within outliveRecordWithin, and under fast's TTL lengthened to an hour:
// an erasure must hold through a replay once its record is gone and its
// events are within their TTL again, which only a schedule that outlives
// the record shows. (Every schedule edits fast's TTL twice, once in
// retimeBesideForget: left to the edits, it ended short.)
func (sc *schedule) check() {
	sc.t.Helper()
	sc.eraseShortLived()
	sc.outliveFirstRecord()
	if sc.fastTTL != time.Hour {
		// A TTL lengthened once a record has ended: what the record
		// covered is within the TTL again, and the replay reads it.
		sc.editTTL()
	}
	sc.replay()
	sc.settle(sc.s.group)
	sc.s.term(sc.main)
	if sc.second != nil {
		sc.s.term(sc.second)
	}
	rows := sc.nothingLost()
	sc.note("check: %d events, %d rows, %d forgets, %d observations", len(sc.events), len(rows), len(sc.forgets), sc.seen.observations)
	for _, v := range sc.seen.order {
		at := sc.seen.first[v]
		after := "the first step"
		if at >= 0 {
			after = sc.done[at]
		}
		sc.t.Errorf("seed %d: %s (first seen after %s)", sc.seed, v, after)
	}
}

// eraseShortLived is the check's own erasure: a user of fast erased while
// fast's TTL is seconds, of an event stamped ahead when the topic keeps
// its producer's stamps, with no backups. Its ledger record is the
// shortest the schedule can make (fast's TTL, and the topics' keep), so
// the check can outlive it; the event stamped past erased_up_to is
// covered by the record's mark alone, and is within its TTL again once
// the TTL is lengthened. Where the record lives an hour (the topic keeps
// stamps an hour ahead), the check does not wait for it.
func (sc *schedule) eraseShortLived() {
	sc.t.Helper()
	if sc.fastTTL == time.Hour {
		sc.editTTL()
	}
	// The latest event of fast's, of this incarnation of the topic, whose
	// record is stamped at least 30 s past now when ahead is set, of a
	// user no record of whom lives past the check's wait: a user erased
	// for an hour before would not be outlived.
	held := func(user string) bool {
		for _, f := range sc.forgets {
			if f.tenant == "fast" && f.user == user && (f.expires.IsZero() || time.Until(f.expires) > outliveRecordWithin) {
				return true
			}
		}
		return false
	}
	latest := func(ahead bool) (schedEvent, bool) {
		now := time.Now().UnixMilli()
		for _, e := range slices.Backward(sc.events) {
			if e.tenant == "fast" && e.incarnation == len(sc.topicIDs)-1 && (!ahead || e.rec > now+30_000) && !held(e.user) {
				return e, true
			}
		}
		return schedEvent{}, false
	}
	// Under LogAppendTime the broker stamps every record: none is ahead,
	// and the topic deletes the user's events before the record ends, so
	// a record that ends too soon shows in no replay. Two times in three
	// the check sets the topic to CreateTime first, as an operator may.
	if sc.inputStamping == brokerStamps && sc.r.IntN(3) > 0 {
		sc.setStamping(true, hourAhead)
	}
	ahead := sc.inputStamping != brokerStamps
	ev, ok := latest(ahead)
	for range 4 {
		if ok {
			break
		}
		sc.only = "fast"
		sc.produce()
		sc.only = ""
		ev, ok = latest(ahead)
	}
	if !ok {
		ev, ok = latest(false)
	}
	if !ok {
		sc.note("no event of fast's to erase, of a user not erased for longer than the check waits")
		return
	}
	time.Sleep(time.Second) // the workers flush within --flush-interval
	sc.erase(ev, false)
}

// outliveRecordWithin is how long the check waits for a user's ledger
// records to end before its last replay.
const outliveRecordWithin = 90 * time.Second

// outliveFirstRecord waits until every ledger record of one erased user
// has ended, for the user whose last record ends first, if that comes
// within outliveRecordWithin, and notes which. A user erased twice is
// covered by its later record after the first ends: only once all of a
// user's records have ended does the replay read its events unguarded.
func (sc *schedule) outliveFirstRecord() {
	type who struct{ tenant, user string }
	last := map[who]time.Time{}
	for _, f := range sc.forgets {
		w := who{f.tenant, f.user}
		if end, seen := last[w]; f.expires.IsZero() || (seen && end.IsZero()) {
			last[w] = time.Time{} // in force until retired
		} else if !seen || f.expires.After(end) {
			last[w] = f.expires
		}
	}
	var first time.Time
	var user who
	for w, end := range last {
		if !end.IsZero() && (first.IsZero() || end.Before(first)) {
			first, user = end, w
		}
	}
	switch wait := time.Until(first) + time.Second; {
	case first.IsZero():
		sc.note("no erased user's ledger records all end: each is in force until retired")
	case wait > outliveRecordWithin:
		sc.note("the first erased user's records (%s/%s) end at %s, past the check's wait", user.tenant, user.user, first.Format(time.RFC3339))
	default:
		time.Sleep(max(0, wait))
		sc.note("outlived every ledger record of %s/%s (the last ended at %s)", user.tenant, user.user, first.Format(time.RFC3339))
	}
}

// seen is what the checker has observed of a schedule: each violation by
// the step after which it was first seen (an index of the schedule's
// notes), and how far each dead-letter partition has been read.
type seen struct {
	first        map[string]int
	order        []string
	letters      map[int]int64 // the next offset to read, by partition
	observations int
}

// saw records violation v, if new, as seen after the latest step.
func (sc *schedule) saw(v string) {
	if sc.seen.first == nil {
		sc.seen.first = map[string]int{}
	}
	if _, ok := sc.seen.first[v]; !ok {
		sc.seen.first[v] = len(sc.done) - 1
		sc.seen.order = append(sc.seen.order, v)
	}
}

// observe reads the table and the letters placed since the last look, and
// holds them to the promises as things stand: every forget in sc.forgets
// has returned. It returns the rows by event id.
func (sc *schedule) observe() map[string][]rowCells {
	sc.t.Helper()
	sc.seen.observations++
	byID := map[string]schedEvent{}
	for _, ev := range sc.events {
		byID[ev.id] = ev
	}
	rows := sc.readRows()
	for id, versions := range rows {
		for _, v := range sc.checkRow(byID, id, versions) {
			sc.saw(v)
		}
	}
	letters, err := sc.newLetters()
	if err != nil {
		sc.t.Fatalf("read the dead-letter topic: %v", err)
	}
	for _, v := range sc.checkLetters(letters) {
		sc.saw(v)
	}
	for _, v := range sc.checkBackups() {
		sc.saw(v)
	}
	return rows
}

// checkBackups holds the ledger to promise 5: an erasure recorded with
// --backup-retention has a record in force for that long after forget
// returned (a restore of a backup taken before it must find the user
// erased), whatever later forgets retire.
func (sc *schedule) checkBackups() []string {
	now := time.Now()
	var bad []string
	var recs []erasure.Erasure
	read := false
	for _, f := range sc.forgets {
		if f.backups <= 0 || !now.Before(f.returned.Add(f.backups)) {
			continue
		}
		if !read {
			var err error
			if recs, _, err = erasure.NewStore(sc.s.dc, sc.s.table+"-erasures").Load(context.Background(), now); err != nil {
				return []string{fmt.Sprintf("read the erasure ledger: %v", err)}
			}
			read = true
		}
		kept := slices.ContainsFunc(recs, func(r erasure.Erasure) bool {
			return r.Tenant == f.tenant && r.User == f.user && (r.Expires.IsZero() || !r.Expires.Before(f.returned.Add(f.backups-time.Minute)))
		})
		if !kept {
			bad = append(bad, fmt.Sprintf("the erasure of %s/%s with --backup-retention %s has no record in force that long (forget returned %s)", f.tenant, f.user, f.backups, f.returned.Format(time.RFC3339Nano)))
		}
	}
	return bad
}

// newLetters reads the letters placed since the last call, each partition
// from where it stopped, or from its log start once the broker has deleted
// past that (letters it deleted unseen are a retention the checker could
// not watch, and rare: a look follows every step).
func (sc *schedule) newLetters() ([]kafka.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sc.seen.letters == nil {
		sc.seen.letters = map[int]int64{}
	}
	md, err := sc.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{sc.s.dlq}})
	if err != nil {
		return nil, err
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return nil, fmt.Errorf("metadata of %s: %v", sc.s.dlq, md.Topics)
	}
	var out []kafka.Message
	for _, p := range md.Topics[0].Partitions {
		next := sc.seen.letters[p.ID]
		for {
			offs, err := sc.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
				sc.s.dlq: {kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID)}}})
			if err != nil {
				return nil, err
			}
			po := offs.Topics[sc.s.dlq]
			if len(po) != 1 || po[0].Error != nil {
				return nil, fmt.Errorf("offsets of %s/%d: %v", sc.s.dlq, p.ID, po)
			}
			next = max(next, po[0].FirstOffset)
			if next >= po[0].LastOffset {
				break
			}
			res, err := sc.client.Fetch(ctx, &kafka.FetchRequest{Topic: sc.s.dlq, Partition: p.ID, Offset: next, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			if errors.Is(res.Error, kafka.OffsetOutOfRange) {
				continue // deleted meanwhile: from the new log start
			}
			if res.Error != nil {
				return nil, fmt.Errorf("fetch %s/%d at %d: %w", sc.s.dlq, p.ID, next, res.Error)
			}
			from := next
			for {
				rec, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("read %s/%d at %d: %w", sc.s.dlq, p.ID, next, err)
				}
				if rec.Offset < next {
					continue
				}
				m := kafka.Message{Topic: sc.s.dlq, Partition: p.ID, Offset: rec.Offset, Headers: rec.Headers}
				if rec.Value != nil {
					if m.Value, err = io.ReadAll(rec.Value); err != nil {
						return nil, err
					}
				}
				out = append(out, m)
				next = rec.Offset + 1
			}
			if next == from {
				return nil, fmt.Errorf("fetch %s/%d at %d: no records below its end", sc.s.dlq, p.ID, next)
			}
		}
		sc.seen.letters[p.ID] = next
	}
	return out, nil
}

// rowCells are a row's key and the timestamps of its event cells.
type rowCells struct {
	key string
	ts  []bigtable.Timestamp
}

// readRows reads the table's event rows by event id.
func (sc *schedule) readRows() map[string][]rowCells {
	out := map[string][]rowCells{}
	err := sc.s.dc.Open(sc.s.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		rc := rowCells{key: r.Key()}
		for _, it := range r["c"] {
			if it.Column == "c:event" {
				rc.ts = append(rc.ts, it.Timestamp)
			}
		}
		id := rc.key[strings.LastIndexByte(rc.key, '#')+1:]
		out[id] = append(out[id], rc)
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("^c$"), bigtable.StripValueFilter())))
	if err != nil {
		sc.t.Fatalf("read the table: %v", err)
	}
	return out
}

// checkRow holds one event's rows to promises 1 and 2.
func (sc *schedule) checkRow(byID map[string]schedEvent, id string, rows []rowCells) []string {
	ev, ok := byID[id]
	if !ok {
		return []string{fmt.Sprintf("a row of no event produced: %s", rows[0].key)}
	}
	base, bounded := ev.base()
	if !bounded {
		return []string{fmt.Sprintf("unbounded time, written: %s as %s", ev, rows[0].key)}
	}
	var bad []string
	for _, f := range sc.forgets {
		if f.covered(ev, base) {
			bad = append(bad, fmt.Sprintf("erased, written again: %s as %s (forget up to %s, mark %v)", ev, rows[0].key, f.upTo.Format(time.RFC3339Nano), f.ends))
		}
	}
	bad = append(bad, sc.offboardedRow(ev, base, rows[0].key)...)
	// One cell at its time + its TTL - default_ttl, for each TTL its
	// tenant had while it could be written (a redelivery after a TTL edit
	// writes a version at the new one, which worker retime repairs).
	want := map[bigtable.Timestamp]bool{bigtable.Time(base.Add(scheduleTTLs[ev.tenant] - scheduleDefault)): true}
	if ev.tenant == "fast" {
		clear(want)
		for ttl := range sc.fastTTLs {
			want[bigtable.Time(base.Add(ttl-scheduleDefault))] = true
		}
	}
	for _, r := range rows {
		p, err := rowkey.Parse(r.key)
		switch {
		case len(rows) > 1:
			bad = append(bad, fmt.Sprintf("%s in %d rows", ev, len(rows)))
		case err != nil || p.Millis != base.UnixMilli():
			bad = append(bad, fmt.Sprintf("%s: row %s, want its time %s (%v)", ev, r.key, base.UTC().Format(time.RFC3339Nano), err))
		case !cellsOf(r.ts, want):
			bad = append(bad, fmt.Sprintf("%s: cells %v, want one at each of %v at most (its time + its TTL - default_ttl)", ev, r.ts, slices.Sorted(maps.Keys(want))))
		}
	}
	return bad
}

// cellsOf reports whether ts holds one cell or more, each at a distinct
// timestamp of want.
func cellsOf(ts []bigtable.Timestamp, want map[bigtable.Timestamp]bool) bool {
	seen := map[bigtable.Timestamp]bool{}
	for _, t := range ts {
		if !want[t] || seen[t] {
			return false
		}
		seen[t] = true
	}
	return len(ts) > 0
}

// mustBeWritten reports whether promise 4 holds ev to a row.
func (sc *schedule) mustBeWritten(ev schedEvent, now time.Time) bool {
	base, bounded := ev.base()
	// An incarnation of the topic deleted since took with it what no
	// worker had read.
	if !bounded || (ev.tenant != "acme" && ev.tenant != "globex") || time.UnixMilli(ev.rec).Before(ev.sentAt.Add(30*time.Second)) ||
		!base.Add(scheduleTTLs[ev.tenant]).After(now.Add(time.Minute)) || ev.incarnation != len(sc.topicIDs)-1 {
		return false
	}
	if !sc.offboardSpares(ev, base) {
		return false
	}
	for _, f := range sc.forgets {
		if f.tenant != ev.tenant || f.user != ev.user {
			continue
		}
		// An erasure's second pass also takes what was written meanwhile;
		// a mark of another incarnation covers all of the user's records,
		// offsets meaning nothing there (docs/retention.md).
		if f.covered(ev, base) || !ev.sentAt.After(f.returned) || (f.ends != nil && f.incarnation != ev.incarnation) {
			return false
		}
	}
	return true
}

// nothingLost observes, holds every event to promise 4, and returns the
// rows observed.
func (sc *schedule) nothingLost() map[string][]rowCells {
	sc.t.Helper()
	now := time.Now()
	rows := sc.observe()
	for _, ev := range sc.events {
		if _, ok := rows[ev.id]; !ok && sc.mustBeWritten(ev, now) {
			sc.saw(fmt.Sprintf("lost: %s has no row", ev))
		}
	}
	return rows
}

// checkLetters holds letters (those with their payload) to promise 3.
func (sc *schedule) checkLetters(letters []kafka.Message) []string {
	keep, err := sc.topicKeep(sc.s.dlq)
	if err != nil {
		return []string{err.Error()}
	}
	type source struct {
		topicID         string
		partition, offs int64
	}
	at, byID := map[source]schedEvent{}, map[string]schedEvent{}
	for _, ev := range sc.events {
		byID[ev.id] = ev
		at[source{sc.topicIDs[ev.incarnation], int64(ev.partition), ev.offset}] = ev
	}
	var bad []string
	now := time.Now()
	for _, m := range letters {
		if m.Value == nil || header(m, deadletter.HeaderPayload) == "omitted" || sc.isForged(m.Partition, m.Offset) {
			continue
		}
		part, _ := strconv.ParseInt(header(m, deadletter.HeaderSourcePartition), 10, 64)
		off, _ := strconv.ParseInt(header(m, deadletter.HeaderSourceOffset), 10, 64)
		// A letter with its payload is of the event its value names. Its
		// source headers alone may mislead: a letter names the incarnation
		// its worker last read, and one placed before the worker's next
		// check of the id after a recreation names the one before
		// (docs/retention.md).
		var named struct {
			ID string `json:"event_id"`
		}
		ev, ok := schedEvent{}, false
		if json.Unmarshal(m.Value, &named) == nil && named.ID != "" {
			ev, ok = byID[named.ID]
		}
		if !ok {
			ev, ok = at[source{header(m, deadletter.HeaderSourceTopicID), part, off}]
		}
		placed, perr := time.Parse(time.RFC3339Nano, header(m, deadletter.HeaderPlaced))
		if !ok || perr != nil {
			bad = append(bad, fmt.Sprintf("a letter with payload of no event produced, or unplaced: %d/%d", part, off))
			continue
		}
		bad = append(bad, sc.offboardedLetter(ev, placed)...)
		bound := placed.Add(sc.shortestAt(placed, now))
		if base, bounded := ev.base(); bounded {
			bound = base.Add(scheduleDefault) // an unlisted tenant's (the only valid events dead-lettered here)
		}
		// The broker counts the keep from its own clock (its append time
		// under LogAppendTime, which kafka-go does not read back), and a
		// worker's clock may lie: the letter was appended by now at the
		// latest, and by its stamp under CreateTime.
		if life := sc.letterLife(m.Partition, m.Offset, later(placed, now), keep); keep < 0 || life.After(bound) {
			bad = append(bad, fmt.Sprintf("letter of %s keeps its payload past %s: placed %s at offset %d in a topic that keeps %s, readable until %s", ev, bound.UTC().Format(time.RFC3339),
				placed.UTC().Format(time.RFC3339Nano), m.Offset, keep, life.UTC().Format(time.RFC3339)))
		}
	}
	return bad
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// topicKeep reads how long topic keeps a record stamped when it was
// produced, from the broker: retention.ms + segment.ms + the broker's
// retention check; -1 for forever. A record stamped ahead holds its
// partition longer (letterLife): the worker's letters are stamped when
// they are placed, and the letters the schedule forged are known.
func (sc *schedule) topicKeep(topic string) (time.Duration, error) {
	ctx := context.Background()
	res, err := sc.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic},
		{ResourceType: kafka.ResourceTypeBroker, ResourceName: "1", ConfigNames: []string{"log.retention.check.interval.ms"}}}})
	if err != nil {
		return 0, fmt.Errorf("the settings of %s: %v", topic, err)
	}
	ms := map[string]int64{}
	for _, r := range res.Resources {
		for _, e := range r.ConfigEntries {
			n, _ := strconv.ParseInt(e.ConfigValue, 10, 64)
			ms[e.ConfigName] = n
		}
	}
	if ms["retention.ms"] < 0 {
		return -1, nil
	}
	return time.Duration(ms["retention.ms"]+ms["segment.ms"]+ms["log.retention.check.interval.ms"]) * time.Millisecond, nil
}
