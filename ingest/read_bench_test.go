package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/ingest/kwire"
)

// benchFetcher is a fetcher that reads responses into messages and tracks
// them, without a consumer around it.
func benchFetcher(tb testing.TB) (*fetcher, *partition) {
	tb.Helper()
	tr := newTracker()
	p := newPartition(0, tr.Assign(map[int]int64{0: 0})[0], 0)
	f := &fetcher{topic: "t", tracker: tr, chunks: newChunks(), log: quiet, records: kwire.NewReader(1<<30, 1<<20), readCommitted: true,
		m: &consumerMetrics{undecodable: noop.Int64Counter{}, fetchErrors: noop.Int64Counter{}, aborted: noop.Int64Counter{}}}
	tb.Cleanup(f.records.Close)
	return f, p
}

// clicks returns n records of about 200 bytes with a header, as events
// are produced.
func clicks(n int) []protocol.Record {
	at := time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
	recs := make([]protocol.Record, n)
	for i := range recs {
		v := fmt.Sprintf(`{"event_id":"e-%06d","tenant_id":"acme","user_id":"u-%d","occurred_at":"2026-04-30T09:00:00.123Z","page":"/products/%d"}`, i, i%50, i)
		recs[i] = protocol.Record{Time: at, Key: protocol.NewBytes([]byte(fmt.Sprintf("u-%d", i%50))), Value: protocol.NewBytes([]byte(v)),
			Headers: []protocol.Header{{Key: "source", Value: []byte("web")}}}
	}
	return recs
}

// BenchmarkRead reads a partition's part of a response, 100 uncompressed
// batches of 10 events, into messages and tracks them, as the fetcher
// does, then settles them: the time and allocations per event of the read
// path.
func BenchmarkRead(b *testing.B) {
	var data []byte
	recs := clicks(1000)
	for i := 0; i < len(recs); i += 10 {
		data = append(data, recordBatch(b, compress.None, int64(i), -1, 0, recs[i:i+10]...)...)
	}
	benchRead(b, data, 1000, func(f *fetcher) { f.aborts.Reset(nil) })
}

// BenchmarkReadTransactions reads, under read_committed, a response of
// two producers' transactions, 10 events a batch: one's committed, the
// other's aborted, 100 batches and 20 markers in all. The time and
// allocations are per event delivered (500).
func BenchmarkReadTransactions(b *testing.B) {
	var data []byte
	var aborted []kwire.AbortedTransaction
	recs := clicks(10)
	const committer, aborter = 1, 2
	off := int64(0)
	for range 10 {
		aborted = append(aborted, kwire.AbortedTransaction{ProducerID: aborter, FirstOffset: off + 10})
		for range 5 {
			data = append(data, recordBatch(b, compress.None, off, committer, attrTransactional, recs...)...)
			data = append(data, recordBatch(b, compress.None, off+10, aborter, attrTransactional, recs...)...)
			off += 20
		}
		data = append(data, txnMarker(b, off, committer, false)...)
		data = append(data, txnMarker(b, off+1, aborter, true)...)
		off += 2
	}
	res := fetchResponse11(b, off, off, aborted, data)
	benchRead(b, res.Partitions[0].Records, 500, func(f *fetcher) { f.aborts.Reset(&res.Partitions[0]) })
}

// benchRead reads data, which holds events records to deliver, b.N times,
// resetting the fetcher's aborted transactions before each (a response's
// list).
func benchRead(b *testing.B, data []byte, events int, reset func(*fetcher)) {
	f, p := benchFetcher(b)
	ctx := context.Background()
	acks := make([]Ack, 0, events)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.next = 0
		reset(f)
		rs := readState{reserved: 1 << 30}
		if err := f.read(ctx, p, data, &rs); err != nil {
			b.Fatal(err)
		}
		acks = acks[:0]
		n := 0
		for _, c := range append(rs.full, rs.batch) {
			for _, m := range c {
				acks = append(acks, m.Ack)
			}
			n += len(c)
			f.chunks.put(c)
		}
		if n != events {
			b.Fatalf("read %d events, want %d", n, events)
		}
		f.tracker.DoneAll(acks)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
	b.ReportMetric(0, "ns/op")
}
