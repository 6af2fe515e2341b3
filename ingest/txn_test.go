package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/ingest/kwire"
)

// Attributes of a v2 batch beside its codec.
const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

// txnMarker is producer's COMMIT or ABORT marker at offset at: a control
// batch of one record, key version 0 and type (0 abort, 1 commit).
func txnMarker(t testing.TB, at, producer int64, abort bool) []byte {
	typ := uint16(1)
	if abort {
		typ = 0
	}
	key := binary.BigEndian.AppendUint16([]byte{0, 0}, typ)
	return recordBatch(t, compress.None, at, producer, attrTransactional|attrControl,
		protocol.Record{Time: time.UnixMilli(1), Key: protocol.NewBytes(key), Value: protocol.NewBytes([]byte{0, 0, 0, 0, 0, 1})})
}

// fetchResponse11 frames a Fetch response v11 with one partition of topic
// t, partition 0, as a broker sends it, and reads it as the fetcher does.
func fetchResponse11(t testing.TB, hw, lso int64, aborted []kwire.AbortedTransaction, records []byte) *fetchResponse {
	t.Helper()
	be := binary.BigEndian
	b := be.AppendUint32(nil, 7)           // correlation id
	b = be.AppendUint32(b, 0)              // throttle
	b = be.AppendUint16(b, 0)              // error
	b = be.AppendUint32(b, 0)              // session
	b = be.AppendUint32(b, 1)              // topics
	b = append(be.AppendUint16(b, 1), 't') // topic
	b = be.AppendUint32(b, 1)              // partitions
	b = be.AppendUint32(b, 0)              // partition
	b = be.AppendUint16(b, 0)              // error
	b = be.AppendUint64(b, uint64(hw))
	b = be.AppendUint64(b, uint64(lso))
	b = be.AppendUint64(b, 0) // log start
	b = be.AppendUint32(b, uint32(len(aborted)))
	for _, a := range aborted {
		b = be.AppendUint64(be.AppendUint64(b, uint64(a.ProducerID)), uint64(a.FirstOffset))
	}
	b = be.AppendUint32(b, 0xffffffff) // preferred read replica
	b = append(be.AppendUint32(b, uint32(len(records))), records...)
	res, err := kwire.ReadFetchResponse(bytes.NewReader(append(be.AppendUint32(nil, uint32(len(b))), b...)), 11, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fetchResponse{res}
}

// counter counts what is added to it.
type counter struct {
	noop.Int64Counter
	n atomic.Int64
}

func (c *counter) Add(_ context.Context, n int64, _ ...metric.AddOption) { c.n.Add(n) }

// A partition's log as a read_committed fetch from offset 100 returns it:
// it begins in the middle of producer 1's aborted transaction (begun at
// 95), which holds a batch that cannot be decoded and a record too large
// to hold; producer 2's committed transaction is interleaved with it;
// producer 1's next transaction, committed, follows its ABORT marker, then
// a batch outside transactions; producer 3's transaction is still open
// from 113, the last stable offset, to the high watermark 115.
func transactionalLog(t *testing.T) []byte {
	const p1, p2 = 1, 2
	broken := recordBatch(t, compress.Zstd, 104, p1, attrTransactional, clicks(1)...)
	broken[len(broken)-3] ^= 0xff // the compressed data, behind a valid checksum
	binary.BigEndian.PutUint32(broken[17:], crcOf(broken[21:]))
	huge := clicks(1)
	huge[0].Value = protocol.NewBytes(bytes.Repeat([]byte("x"), 2<<20))
	return slices.Concat(
		recordBatch(t, compress.None, 100, p1, attrTransactional, clicks(2)...),
		recordBatch(t, compress.Lz4, 102, p2, attrTransactional, clicks(2)...),
		broken,
		recordBatch(t, compress.None, 105, p1, attrTransactional, huge...),
		txnMarker(t, 106, p2, false),
		txnMarker(t, 107, p1, true),
		recordBatch(t, compress.Snappy, 108, p1, attrTransactional, clicks(2)...),
		txnMarker(t, 110, p1, false),
		recordBatch(t, compress.Gzip, 111, -1, 0, clicks(2)...),
	)
}

// Under read_committed, the records of aborted transactions are never
// handed on, not even as a dead letter for a batch that cannot be decoded
// or a record cut, and their offsets are settled as a marker's are: the
// commit goes past them. Lag counts to the last stable offset, the open
// transaction beyond it shows as unstable lag, and a partition waiting at
// it is at its end, not stalled. Under read_uncommitted, all of it is
// handed on. A response whose batches begin before the offset asked for
// is read for its markers from its first batch.
func TestReadCommittedSkipsAbortedTransactions(t *testing.T) {
	t.Parallel()
	log := transactionalLog(t)
	first, _, _, _ := kwire.NextBatch(log)
	cases := []struct {
		committed       bool
		from            int64
		data            []byte
		want            []int64
		aborted, broken int64
		next            int64 // and the commit point
	}{
		{true, 100, log, []int64{102, 103, 108, 109, 111, 112}, 4, 0, 113},
		{false, 100, log, []int64{100, 101, 102, 103, 104, 105, 108, 109, 111, 112}, 0, 1, 113},
		// Producer 1's ABORT at 107 lies before the offset asked for: its
		// next transaction, at 108, is committed.
		{true, 109, log, []int64{109, 111, 112}, 0, 0, 113},
		// A response of aborted records alone, cut before the marker: the
		// commit goes past them at once.
		{true, 100, log[:first.Size()], nil, 2, 0, 102},
	}
	for _, tc := range cases {
		committed := tc.committed
		tr := newTracker()
		p := newPartition(0, tr.Assign(map[int]int64{0: tc.from})[0], tc.from)
		p.movedAt.Store(time.Now().Add(-time.Hour).UnixNano())
		out := make(chan []Fetched, 16)
		aborted, undecodable := &counter{}, &counter{}
		f := &fetcher{topic: "t", tracker: tr, budget: &budget{limit: 64 << 20}, flowing: map[int]bool{}, chunks: newChunks(), log: quiet, out: out,
			records: kwire.NewReader(64<<20, 1<<20), readCommitted: committed,
			m: &consumerMetrics{undecodable: undecodable, fetchErrors: noop.Int64Counter{}, aborted: aborted}}
		reserved, _ := f.budget.TryReserve(1, 32<<20)
		res := fetchResponse11(t, 115, 113, []kwire.AbortedTransaction{{ProducerID: 1, FirstOffset: 95}}, tc.data)
		f.handle(context.Background(), fetchResult{parts: []*partition{p}, reserved: reserved, res: res})
		f.records.Close()
		close(out)
		var got []int64
		var acks []Ack
		for c := range out {
			for _, m := range c {
				got = append(got, m.Msg.Offset)
				acks = append(acks, m.Ack)
			}
		}
		tr.DoneAll(acks)
		if !slices.Equal(got, tc.want) {
			t.Errorf("committed %v from %d: handed on offsets %v, want %v", committed, tc.from, got, tc.want)
		}
		if aborted.n.Load() != tc.aborted || undecodable.n.Load() != tc.broken {
			t.Errorf("committed %v from %d: %d aborted records, %d undecodable batches; want %d and %d", committed, tc.from, aborted.n.Load(), undecodable.n.Load(), tc.aborted, tc.broken)
		}
		if c := byPartition(tr)[0]; c != tc.next || p.next != tc.next {
			t.Errorf("committed %v from %d: commit point %d, next %d; want both %d, past every aborted offset and marker", committed, tc.from, c, p.next, tc.next)
		}
		c := &Consumer{cfg: ConsumerConfig{ReadUncommitted: !committed, StallTimeout: time.Minute}, tracker: tr, budget: f.budget, parts: []*partition{p}}
		s := c.Status().Partitions[0]
		wantLag := 113 - tc.next
		if !committed {
			wantLag = 115 - tc.next // to the high watermark, past the open transaction
		}
		if s.Lag != wantLag || s.LastStable != 113 || s.UnstableLag != 2 || s.Stalled != "" {
			t.Errorf("committed %v from %d: status %+v; want lag %d, last stable 113, unstable lag 2, not stalled", committed, tc.from, s, wantLag)
		}
	}
}
