// Package redrive sends dead letters through the worker's path again: each
// letter is turned back into the record it came from (from its payload, or
// from the input topic when the letter kept none), decided as the worker
// decides (pipeline.Decide, under the tenants file in force now) and, when
// it is now a valid event that has not expired, written with exactly the
// cells the worker would have written. The cells are a pure function of
// the original record, so a second redrive rewrites the same cells and adds
// no version.
package redrive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Outcomes of a letter, the keys of Report.Outcomes.
const (
	Written       = "written"        // (or, dry, would be written)
	StillRejected = "still_rejected" // the record is still not a valid event
	Unlisted      = "unlisted"       // its tenant is still not listed (unlisted_tenants: dead-letter)
	Expired       = "expired"        // it has expired since: nothing to write
	SourceGone    = "source_gone"    // no payload, and the input topic no longer has the record
	Undecodable   = "undecodable_batch"
	Refused       = "bigtable_refused" // Bigtable refused the row again
	Erased        = "erased"           // its user was erased (worker forget) up to or after its time
	// TimeAhead: under StrictRetention, its record's or event's time lies
	// past its letter's time + --max-clock-skew (pipeline.TimeAhead).
	TimeAhead = "time_ahead"
	// Untrusted: its signature does not verify (with Keys), or it names a
	// source other than the input topic, or it was cut and keeps no hash
	// of the record to check the one read again against.
	Untrusted = "untrusted"
)

// Report counts letters by their reason class and by outcome.
type Report struct {
	Letters  int64                       `json:"letters"`
	ByReason map[string]map[string]int64 `json:"by_reason"`
	Outcomes map[string]int64            `json:"outcomes"`
	Applied  bool                        `json:"applied"`
}

func (r *Report) count(reason, outcome string) {
	r.Letters++
	if r.ByReason[reason] == nil {
		r.ByReason[reason] = map[string]int64{}
	}
	r.ByReason[reason][outcome]++
	r.Outcomes[outcome]++
}

// Run redrives the letters o names through decoder d under cfg, writing
// to w when o.Apply. The report says what was done, also with an error.
func Run(ctx context.Context, o Options, d *event.Decoder, cfg *tenants.Config, w *sink.Writer, log *slog.Logger) (*Report, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := o.topics(ctx); err != nil {
		return nil, err
	}
	if o.Keys == nil {
		log.Warn("letters are not verified: without --dlq-signing-key-file, a letter anyone produced to a dead-letter topic is trusted as the worker's")
	}
	transport, err := o.Security.Transport()
	if err != nil {
		return nil, err
	}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(o.Brokers...), Transport: kafkaconn.Waits(transport), Timeout: 30 * time.Second}
	selection := o.selection(cfg.Version)
	cp, err := loadCheckpoint(o.Checkpoint, selection)
	if err != nil {
		return nil, err
	}
	rep := &Report{ByReason: map[string]map[string]int64{}, Outcomes: map[string]int64{}, Applied: o.Apply}
	r := &run{o: o, d: d, cfg: cfg, w: w, log: log, client: client, rep: rep, cp: cp.Next, selection: selection}
	for _, topic := range o.Topics {
		if err := r.topic(ctx, topic); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

type run struct {
	o      Options
	d      *event.Decoder
	cfg    *tenants.Config
	w      *sink.Writer
	log    *slog.Logger
	client *kafka.Client
	rep    *Report
	cp     map[string]int64
	// selection names the letters of the run, in its checkpoint.
	selection string
}

// BatchRows bounds the rows written at once.
const BatchRows = 500

func (r *run) topic(ctx context.Context, topic string) error {
	parts, err := r.partitions(ctx, topic)
	if err != nil {
		return err
	}
	offs, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: parts}})
	if err != nil {
		return fmt.Errorf("offsets of %s: %w", topic, err)
	}
	byPart := offs.Topics[topic]
	slices.SortFunc(byPart, func(a, b kafka.PartitionOffsets) int { return a.Partition - b.Partition })
	for _, p := range byPart {
		if p.Error != nil {
			return fmt.Errorf("offsets of %s/%d: %w", topic, p.Partition, p.Error)
		}
		if r.o.Partition >= 0 && p.Partition != r.o.Partition {
			continue
		}
		from, to := max(p.FirstOffset, r.o.From), p.LastOffset
		if r.o.To > 0 {
			to = min(to, r.o.To)
		}
		key := topic + "/" + strconv.Itoa(p.Partition)
		if next, ok := r.cp[key]; ok {
			from = max(from, next)
		}
		if err := r.partition(ctx, topic, p.Partition, from, to, key); err != nil {
			return err
		}
	}
	return nil
}

// partitions lists topic's partitions for ListOffsets; a topic that does
// not exist is an error (a mistyped --from-topic must not read as "no
// letters").
func (r *run) partitions(ctx context.Context, topic string) ([]kafka.OffsetRequest, error) {
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var out []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("dead-letter topic %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			out = append(out, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dead-letter topic %s: not found", topic)
	}
	return out, nil
}

// pending are the rows of a partition's letters to be written, not yet
// written, with each letter's reason class; key names the partition in
// the checkpoint.
type pending struct {
	key     string
	rows    []sink.Row
	reasons []string
}

// partition redrives the letters of one partition in [from, to).
func (r *run) partition(ctx context.Context, topic string, part int, from, to int64, cpKey string) error {
	p := &pending{key: cpKey}
	for off := from; off < to; {
		read, next, err := r.fetch(ctx, topic, part, off, to, p)
		if err != nil {
			return err
		}
		if read == 0 {
			return r.flush(ctx, p, off) // nothing more below to, as far as the log says now
		}
		off = next
	}
	return r.flush(ctx, p, to)
}

// fetch redrives the letters of one fetch of topic/part from off, below
// to: read counts them, next is the offset after the last.
func (r *run) fetch(ctx context.Context, topic string, part int, off, to int64, p *pending) (read int, next int64, err error) {
	res, err := r.client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: part, Offset: off, MaxBytes: 8 << 20, MaxWait: time.Second})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return 0, off, fmt.Errorf("read %s/%d at %d: %w", topic, part, off, err)
	}
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return read, off, fmt.Errorf("read %s/%d at %d: %w", topic, part, off, err)
		}
		if rec.Offset < off {
			continue // the batch began before the offset asked for
		}
		if rec.Offset >= to {
			break
		}
		read++
		off = rec.Offset + 1
		if err := r.letter(ctx, topic, part, rec, p); err != nil {
			return read, off, err
		}
	}
	return read, off, nil
}

// letter redrives the letter rec of topic/part: decided and counted, or,
// to be written, added to p, which is written when full.
func (r *run) letter(ctx context.Context, topic string, part int, rec *kafka.Record, p *pending) error {
	letter, err := message(rec)
	if err != nil {
		return fmt.Errorf("read %s/%d at %d: %w", topic, part, rec.Offset, err)
	}
	letter.Topic, letter.Partition = topic, part // what its signature covers
	if !r.trusted(topic, part, letter) {
		// Nothing it says is the worker's word, its reason class neither.
		r.rep.count("unknown", Untrusted)
		return nil
	}
	reason := letterClass(letter)
	if len(r.o.Reasons) > 0 && !slices.Contains(r.o.Reasons, reason) {
		return nil
	}
	row, outcome, err := r.decide(ctx, letter)
	if err != nil {
		return err
	}
	if outcome != Written {
		r.rep.count(reason, outcome)
		return nil
	}
	p.rows, p.reasons = append(p.rows, row), append(p.reasons, reason)
	if len(p.rows) == BatchRows {
		return r.flush(ctx, p, rec.Offset+1)
	}
	return nil
}

// flush writes p's rows (a dry run counts them as written) and, when
// applying, moves p's partition's checkpoint to next.
func (r *run) flush(ctx context.Context, p *pending, next int64) error {
	if len(p.rows) > 0 && r.o.Apply {
		if err := r.write(ctx, p); err != nil {
			return err
		}
	} else {
		for _, reason := range p.reasons {
			r.rep.count(reason, Written)
		}
	}
	p.rows, p.reasons = p.rows[:0], p.reasons[:0]
	if !r.o.Apply {
		return nil // a dry run moves no checkpoint: the real run must see every letter
	}
	r.cp[p.key] = next
	return saveCheckpoint(r.o.Checkpoint, checkpoint{Filters: r.selection, Next: r.cp})
}

// write writes p's rows, within WriteBound when set, and counts each
// letter's outcome.
func (r *run) write(ctx context.Context, p *pending) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if r.o.WriteBound > 0 {
		wctx, cancel = context.WithTimeout(ctx, r.o.WriteBound)
	}
	res, err := r.w.Write(wctx, p.rows)
	cancel()
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		err = fmt.Errorf("not written within %s, Bigtable refusing the writes as a whole (the log says why; run again to resume): %w", r.o.WriteBound, err)
	}
	if err != nil {
		return fmt.Errorf("write %d rows: %w", len(p.rows), err)
	}
	for i, e := range res {
		outcome := Written
		switch {
		case errors.Is(e, sink.ErrWithdrawn):
			outcome = Erased // erased while the run went on
		case e != nil:
			outcome = Refused
		}
		r.rep.count(p.reasons[i], outcome)
	}
	return nil
}
