package redrive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/sink"
)

// trusted reports whether the letter is the worker's word: signed with one
// of the keys (when there are keys), in the topic it was produced to,
// about a record of the input topic, and, when cut with part of its
// payload, with the hash of the record to read again.
func (r *run) trusted(topic string, part int, letter ingest.Message) bool {
	if r.o.Keys != nil {
		if err := r.o.Keys.Verify(letter); err != nil {
			r.log.Warn("letter not trusted", "topic", topic, "partition", part, "offset", letter.Offset, "err", err)
			return false
		}
	}
	if header(letter, deadletter.HeaderSourceOffsetLast) != "" {
		return true // an undecodable batch: never written again, its records are in the input topic
	}
	if src := header(letter, deadletter.HeaderSourceTopic); r.o.InputTopic != "" && src != r.o.InputTopic {
		r.log.Warn("letter not trusted: its source is not the input topic", "topic", topic, "partition", part, "offset", letter.Offset, "source_topic", src, "input_topic", r.o.InputTopic)
		return false
	}
	if header(letter, deadletter.HeaderTruncated) == "true" && header(letter, deadletter.HeaderPayload) != "omitted" &&
		header(letter, deadletter.HeaderOriginalSHA256) == "" {
		r.log.Warn("letter not trusted: cut without the hash of its record", "topic", topic, "partition", part, "offset", letter.Offset)
		return false
	}
	return true
}

// decide turns a letter back into its record and decides it.
func (r *run) decide(ctx context.Context, letter ingest.Message) (sink.Row, string, error) {
	if header(letter, deadletter.HeaderSourceOffsetLast) != "" {
		return sink.Row{}, Undecodable, nil // a batch: its records are in the input topic, as they were
	}
	src, ok, err := r.original(ctx, letter)
	if err != nil || !ok {
		return sink.Row{}, SourceGone, err
	}
	var ledger *erasure.Ledger
	if r.o.Erasures != nil {
		ledger = r.o.Erasures()
	}
	if r.o.Schemas != nil {
		if err := r.o.Schemas.Await(ctx, src.Value); err != nil {
			return sink.Row{}, "", fmt.Errorf("letter at offset %d: %w", letter.Offset, err)
		}
	}
	now := r.o.Now()
	dec := pipeline.Decide(r.d, r.cfg, ledger, &src, now, r.latest(letter, now))
	if dec.Fate == pipeline.Lookup {
		// The ledger holds the user compact: it reads the user's record,
		// then knows.
		if err := ledger.Resolve(ctx, dec.Event.Tenant, dec.Event.User); err != nil {
			return sink.Row{}, "", fmt.Errorf("letter at offset %d: %w", letter.Offset, err)
		}
		dec = pipeline.Decide(r.d, r.cfg, ledger, &src, now, r.latest(letter, now))
	}
	switch dec.Fate {
	case pipeline.TimeAhead:
		return sink.Row{}, TimeAhead, nil
	case pipeline.Held:
		return sink.Row{}, "", fmt.Errorf("letter at offset %d: %w", letter.Offset, dec.Err)
	case pipeline.Lookup:
		return sink.Row{}, "", fmt.Errorf("letter at offset %d: the erasure ledger did not keep the lookup of its user", letter.Offset)
	case pipeline.Erased:
		return sink.Row{}, Erased, nil
	case pipeline.Write:
		return dec.Row, Written, nil
	case pipeline.Expired:
		return sink.Row{}, Expired, nil
	case pipeline.UnlistedDeadLetter:
		return sink.Row{}, Unlisted, nil
	}
	return sink.Row{}, StillRejected, nil
}

// latest is, under StrictRetention, the latest time the letter's event
// may carry: the worker's rule, counted from when the record was first
// seen, which is no later than its letter was produced. Counted from the
// redrive's clock instead, a record stamped a year ahead, dead-lettered
// for it, would be written by a redrive run a year later, having bought
// that year. It counts from the earliest of the redrive's clock, the
// letter's timestamp and when the worker placed it (HeaderPlaced, signed
// when letters are). Zero (no rule) without StrictRetention.
func (r *run) latest(letter ingest.Message, now time.Time) time.Time {
	if !r.o.StrictRetention {
		return time.Time{}
	}
	seen := now
	if !letter.Time.IsZero() && letter.Time.Before(seen) {
		seen = letter.Time
	}
	// When the worker placed it, signed with the rest: a letter copied
	// later (or stamped anew by a broker under LogAppendTime) keeps it.
	// Unsigned, it is a forger's word as the timestamp is, and the
	// earlier of the two only makes the rule stricter.
	if placed, err := time.Parse(time.RFC3339Nano, header(letter, deadletter.HeaderPlaced)); err == nil && placed.Before(seen) {
		seen = placed
	}
	return pipeline.StrictLatest(seen, r.d.MaxClockSkew)
}

// original is the record a letter stands for: its payload with the
// original headers (ours, cellttl.*, left out) and timestamp, or, when it
// kept none or only part of it, the record read again from the input
// topic. ok is false when that is gone.
func (r *run) original(ctx context.Context, letter ingest.Message) (ingest.Message, bool, error) {
	topic := header(letter, deadletter.HeaderSourceTopic)
	part, perr := strconv.Atoi(header(letter, deadletter.HeaderSourcePartition))
	off, oerr := strconv.ParseInt(header(letter, deadletter.HeaderSourceOffset), 10, 64)
	if topic == "" || perr != nil || oerr != nil {
		return ingest.Message{}, false, nil // not a letter of cellttl's
	}
	if header(letter, deadletter.HeaderTruncated) != "true" {
		// The letter says which incarnation of the topic its record was
		// read from: an erasure's mark is held to that one, not to the
		// one this run reads.
		m := ingest.Message{Topic: topic, TopicID: header(letter, deadletter.HeaderSourceTopicID), Partition: part, Offset: off, Key: letter.Key, Value: letter.Value}
		if ts := header(letter, deadletter.HeaderSourceTimestamp); ts != "" {
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				return ingest.Message{}, false, nil // not a letter cellttl wrote: its record cannot be known
			}
			m.Time = t
		}
		for _, h := range letter.Headers {
			if !strings.HasPrefix(h.Key, "cellttl.") {
				m.Headers = append(m.Headers, h)
			}
		}
		return m, true, nil
	}
	res, err := r.client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: part, Offset: off, MaxBytes: int64(r.o.MaxEventBytes) + 1<<20, MaxWait: time.Second})
	if err == nil {
		err = res.Error
	}
	switch {
	case errors.Is(err, kafka.OffsetOutOfRange), errors.Is(err, kafka.UnknownTopicOrPartition):
		return ingest.Message{}, false, nil // the input topic let it go, or is gone
	case err != nil:
		return ingest.Message{}, false, fmt.Errorf("read the source of a letter, %s/%d at %d: %w", topic, part, off, err)
	}
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return ingest.Message{}, false, nil
		}
		if err != nil {
			return ingest.Message{}, false, fmt.Errorf("read the source of a letter, %s/%d at %d: %w", topic, part, off, err)
		}
		if rec.Offset == off {
			m, err := message(rec)
			m.Topic, m.TopicID, m.Partition = topic, header(letter, deadletter.HeaderSourceTopicID), part
			if err != nil {
				return m, false, err
			}
			// The offset may name another record since (the topic was
			// made again): only the record the letter names.
			return m, r.same(letter, m), nil
		}
	}
}

// same reports whether rec, read again at a letter's source offset, is the
// record the letter stands for: by the digest of its value the letter
// kept (plain when it was cut with part of its payload; keyed, checked
// with the keys given, when it kept none and was signed), else by its
// timestamp, which a letter always keeps.
func (r *run) same(letter, rec ingest.Message) bool {
	sum := sha256.Sum256(rec.Value)
	if want := header(letter, deadletter.HeaderOriginalSHA256); want != "" {
		return hex.EncodeToString(sum[:]) == want
	}
	if mac := header(letter, deadletter.HeaderOriginalHMAC); mac != "" && r.o.Keys != nil {
		return r.o.Keys.VerifyOriginal(mac, sum)
	}
	ts := ""
	if !rec.Time.IsZero() {
		ts = rec.Time.UTC().Format(time.RFC3339Nano)
	}
	return ts == header(letter, deadletter.HeaderSourceTimestamp)
}

// message copies a record out of a fetch response.
func message(rec *kafka.Record) (ingest.Message, error) {
	m := ingest.Message{Offset: rec.Offset, Time: rec.Time}
	var err error
	if rec.Key != nil {
		if m.Key, err = protocol.ReadAll(rec.Key); err != nil {
			return m, err
		}
	}
	if rec.Value != nil {
		if m.Value, err = protocol.ReadAll(rec.Value); err != nil {
			return m, err
		}
	}
	for _, h := range rec.Headers {
		m.Headers = append(m.Headers, ingest.Header{Key: h.Key, Value: h.Value})
	}
	return m, nil
}

// letterClass is a letter's reason class: its own header, or the reason
// of a letter without payload (which is the class), else "unknown".
func letterClass(m ingest.Message) string {
	if c := header(m, deadletter.HeaderReasonClass); c != "" {
		return c
	}
	if header(m, deadletter.HeaderPayload) == "omitted" || header(m, deadletter.HeaderSourceOffsetLast) != "" {
		return header(m, deadletter.HeaderReason)
	}
	return "unknown"
}

// header is the value of a letter's header key: the last of that name,
// since the worker's own headers follow the record's. (A record's own
// cellttl.* headers are renamed in letters; this also holds for letters
// written before they were.)
func header(m ingest.Message, key string) string {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return string(m.Headers[i].Value)
		}
	}
	return ""
}
