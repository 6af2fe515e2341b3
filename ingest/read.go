package ingest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest/kwire"
)

// Cut describes a record too large to hold whole: the value handed on is
// its first bytes (see kwire.Cut).
type Cut = kwire.Cut

// Fetched is a message and the Ack that settles it.
type Fetched struct {
	Msg Message
	Ack Ack
	// Cut is set for a record too large to hold whole: Msg.Value holds
	// only its first bytes (see Cut).
	Cut *Cut
	// Undecodable is set for offsets Msg.Offset to Undecodable.Last of a
	// record batch that could not be decoded: Msg has no key or value, and
	// the message stands for all of them.
	Undecodable *Undecodable
}

// Undecodable describes a record batch the worker could not decode: one
// that decompresses to more than the worker may spend on a batch, or whose
// compressed data or records are broken. Its offsets are dead-lettered as
// one, and the partition goes on after them.
type Undecodable struct {
	Last int64 // the batch's last offset
	// Codec is the batch's compression; Size and SHA256 are of its
	// records as they came from the broker, compressed.
	Codec  string
	Size   int
	SHA256 [sha256.Size]byte
	Reason string
}

// handle takes a round trip's messages into the budget and the tracker and
// hands them on, or sets the partitions it failed back to retry.
func (f *fetcher) handle(ctx context.Context, r fetchResult) {
	if r.err != nil {
		f.budget.Fill(r.reserved, 0)
		if ctx.Err() != nil {
			return
		}
		for _, p := range r.parts {
			f.fail(ctx, p, fmt.Errorf("fetch from broker %d: %w", r.broker, r.err))
		}
		return
	}
	defer f.recycle(r.res)
	byID := make(map[int]*partition, len(r.parts))
	for _, p := range r.parts {
		byID[p.id] = p
	}
	rs := readState{reserved: r.reserved}
	for i := range r.res.Partitions {
		rp := &r.res.Partitions[i]
		p := byID[int(rp.Partition)]
		// A partition whose position was put in question while its
		// request was out (its topic found created again) takes nothing
		// from an answer at that position.
		if p == nil || rp.Topic != f.topic || p.want != wantNothing {
			continue
		}
		if rp.ErrorCode != 0 {
			f.partitionError(ctx, p, kafka.Error(rp.ErrorCode))
			continue
		}
		f.readPartition(ctx, p, rp, &rs)
	}
	f.budget.Fill(r.reserved, rs.charged)
	f.est.observe(rs.estCharged, rs.estWire)
	f.flowing[r.broker] = len(rs.batch)+len(rs.full) > 0
	if n := len(rs.batch); n == chunkSize {
		rs.full = append(rs.full, rs.batch)
	} else if n > 0 {
		// The last chunk, part full, goes on as a slice of its own size:
		// every message handed on then takes one Fetched of memory, which
		// its MessageOverhead covers, however sparse the responses (a
		// trickle of one message per response must not hold a chunk each).
		own := make([]Fetched, n) // exactly n: an append would round up
		copy(own, rs.batch)
		rs.full = append(rs.full, own)
		f.chunks.put(rs.batch)
	}
	for i, chunk := range rs.full {
		select {
		case f.out <- chunk:
		case <-ctx.Done():
			// The generation is over: its messages are stale and dropped.
			for _, c := range rs.full[i:] {
				for _, m := range c {
					f.budget.Release(m.Ack.size)
				}
				f.chunks.put(c)
			}
			return
		}
	}
}

// readPartition reads a partition's part of a response, and what the
// response says of its log.
func (f *fetcher) readPartition(ctx context.Context, p *partition, rp *kwire.FetchPartition, rs *readState) {
	p.answered = time.Now()
	p.hw.Store(rp.HighWatermark)
	p.lso.Store(rp.LastStableOffset)
	if rp.LogStartOffset >= 0 {
		p.logStart.Store(rp.LogStartOffset)
	}
	// The response's aborted transactions decide which of its batches are
	// read: they are of this response alone (see kwire.Aborts).
	if f.readCommitted {
		f.aborts.Reset(rp)
	} else {
		f.aborts.Reset(nil)
	}
	before := p.next
	if err := f.read(ctx, p, rp.Records, rs); err != nil {
		f.fail(ctx, p, err)
	} else {
		f.ok(p)
	}
	end := logEnd(f.readCommitted, rp.HighWatermark, rp.LastStableOffset)
	if p.next > before || p.next >= end {
		p.moved()
	}
	p.lag.Store(max(0, end-p.next))
}

// readState is a response's reading so far.
type readState struct {
	batch    []Fetched   // the chunk being filled
	full     [][]Fetched // chunks filled
	reserved int64       // the reservation the messages must fit in
	charged  int64       // what the messages taken are charged
	// estCharged and estWire are what the batches read whole were charged
	// and their bytes on the wire, for the size estimate.
	estCharged, estWire int64
	// The messages of rs.batch from untracked on are not tracked yet: they
	// are tracked together, under one lock, in epoch a.
	a         *epoch
	untracked int
}

// take appends a message to the chunk being filled.
func (f *fetcher) take(rs *readState, fe Fetched) {
	if len(rs.batch) == cap(rs.batch) {
		// The chunk is full (or there is none yet): the next one.
		f.track(rs)
		if len(rs.batch) > 0 {
			rs.full = append(rs.full, rs.batch)
		}
		rs.batch, rs.untracked = f.chunks.get(), 0
	}
	rs.batch = append(rs.batch, fe)
	rs.charged += fe.Ack.size
}

// track tracks the messages taken and not yet tracked.
func (f *fetcher) track(rs *readState) {
	f.tracker.trackAll(rs.a, rs.batch[rs.untracked:])
	rs.untracked = len(rs.batch)
}

// read reads a partition's record batches, copies their records out of
// the response and tracks them, while they fit in the reservation. A
// record that does not fit stays in Kafka, with every later one of its
// partition, and is fetched again; the first of a response is always
// taken, so that a record larger than the reservation still goes through
// (by that much over the budget). A batch that cannot be decoded is handed
// on as one Undecodable message, and the partition goes on after it. A
// batch of an aborted transaction (f.aborts, set for the response) is
// never handed on: its offsets are settled, as a transaction marker's are,
// before it is opened, so that one too large or broken is neither cut nor
// dead-lettered. The error is for a batch the broker sent corrupt: the
// partition is fetched again from there.
func (f *fetcher) read(ctx context.Context, p *partition, data []byte, rs *readState) error {
	// The messages taken are tracked together, under one lock, in offset
	// order with the offsets settled at once (transaction markers, aborted
	// transactions, records removed by compaction).
	rs.a, rs.untracked = p.a, len(rs.batch)
	defer f.track(rs)
	skip := func(first, last int64) {
		f.track(rs)
		f.tracker.TrackSkipped(p.a, first, last)
		p.next = last + 1
	}
	for len(data) > 0 {
		b, rest, ok, err := kwire.NextBatch(data)
		if err != nil {
			return fmt.Errorf("partition %d of %s: %w", p.id, f.topic, err)
		}
		if !ok {
			return nil // cut short by the response's size: fetched again
		}
		data = rest
		// Every batch, also one read before, goes through the aborts in
		// offset order: its markers end its producer's aborted transaction.
		aborted, err := f.aborts.Aborted(&b)
		if err != nil {
			return fmt.Errorf("partition %d of %s: %w", p.id, f.topic, err)
		}
		if b.Last < p.next {
			continue // read before: batches may start before the offset asked for
		}
		if aborted {
			f.m.aborted.Add(ctx, b.Last-max(b.First, p.next)+1)
		}
		if b.Control() || aborted {
			skip(max(b.First, p.next), b.Last)
			continue
		}
		whole := b.First >= p.next
		charged := rs.charged
		full, err := f.readBatch(p, &b, rs)
		switch {
		case err != nil:
			f.undecodable(ctx, p, &b, rs, err)
		case full:
			return nil
		case p.next <= b.Last:
			// Its last offsets hold no record (compaction removed them):
			// settled, or the commit would stop before them.
			skip(p.next, b.Last)
		}
		if whole && err == nil {
			rs.estCharged += rs.charged - charged
			rs.estWire += int64(b.Size())
		}
	}
	return nil
}

// readBatch takes b's records from p.next on. full reports that it stopped
// for want of room in the reservation.
func (f *fetcher) readBatch(p *partition, b *kwire.Batch, rs *readState) (full bool, err error) {
	if err := f.records.Open(b); err != nil {
		return false, err
	}
	var rec kwire.Record
	for {
		ok, err := f.records.Next(&rec)
		if err != nil || !ok {
			return false, err
		}
		if rec.Offset < p.next {
			continue
		}
		// A header costs its kafka.Header beside its bytes: a record of
		// many empty headers must not escape the budget.
		size := int64(len(rec.Key)+len(rec.Value)+len(rec.Headers)+rec.NumHeaders*headerOverhead) + MessageOverhead
		if rs.charged > 0 && rs.charged+size > rs.reserved {
			return true, nil // the rest is fetched again
		}
		m, err := message(f.topic, p.id, &rec)
		if err != nil {
			return false, err
		}
		f.take(rs, Fetched{Msg: m, Ack: Ack{size: size}, Cut: rec.Cut})
		p.next = rec.Offset + 1
	}
}

// undecodable hands on b's offsets from p.next as one message, to be
// dead-lettered as what it is, and moves the partition past them.
func (f *fetcher) undecodable(ctx context.Context, p *partition, b *kwire.Batch, rs *readState, cause error) {
	payload := b.Payload()
	first := max(b.First, p.next)
	if b.Legacy() {
		// A legacy wrapper's own offset is its last message's: the ones
		// before it are unknown until it is decompressed.
		first = p.next
	}
	u := &Undecodable{Last: b.Last, Codec: b.Codec(), Size: len(payload), SHA256: sha256.Sum256(payload)}
	u.Reason = fmt.Sprintf("record batch at offsets %d to %d (%s, %d bytes) cannot be decoded: %v", first, b.Last, u.Codec, u.Size, cause)
	f.m.undecodable.Add(ctx, 1)
	if n, ok := p.loggedBatch.allow("undecodable"); ok {
		f.log.Error("record batch cannot be decoded; its offsets go to the dead-letter topic as one and the partition goes on",
			"topic", f.topic, "partition", p.id, "first", first, "last", b.Last, "codec", u.Codec, "bytes", u.Size, "repeats", n, "err", cause)
	}
	f.take(rs, Fetched{Msg: Message{Topic: f.topic, Partition: p.id, Offset: first}, Ack: Ack{size: MessageOverhead}, Undecodable: u})
	p.next = b.Last + 1
}

// message copies a record out of the response's buffers: one allocation
// for its key, value and header values, so that a message kept long (its
// dead letter retried) pins only itself.
func message(topic string, partition int, rec *kwire.Record) (Message, error) {
	klen, vlen := len(rec.Key), len(rec.Value)
	buf := make([]byte, klen+vlen+len(rec.Headers))
	m := Message{Topic: topic, Partition: partition, Offset: rec.Offset}
	if rec.Key != nil {
		copy(buf, rec.Key)
		m.Key = buf[:klen:klen]
	}
	if rec.Value != nil {
		copy(buf[klen:], rec.Value)
		m.Value = buf[klen : klen+vlen : klen+vlen]
	}
	if rec.NumHeaders > 0 {
		hs, err := headers(rec, buf[klen+vlen:klen+vlen])
		if err != nil {
			return m, fmt.Errorf("headers of the record at offset %d: %w", rec.Offset, err)
		}
		m.Headers = hs
	}
	// Kafka's "no timestamp" is -1: the zero time, as kafka-go's Reader
	// has it.
	if rec.Time != -1 {
		m.Time = time.UnixMilli(rec.Time).UTC()
	}
	return m, nil
}

// headers decodes the headers of a v2 record, their values copied into
// buf.
func headers(rec *kwire.Record, buf []byte) ([]Header, error) {
	var hs []Header
	err := rec.ReadHeaders(func(k, v []byte) {
		if hs == nil {
			hs = make([]Header, 0, rec.NumHeaders)
		}
		h := Header{Key: string(k)}
		if v != nil {
			start := len(buf)
			buf = append(buf, v...)
			h.Value = buf[start:len(buf):len(buf)]
		}
		hs = append(hs, h)
	})
	if err != nil {
		return nil, err
	}
	return hs, nil
}
