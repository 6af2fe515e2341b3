package kwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// Attributes of a v2 batch beside its codec.
const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

// producedBatch encodes n records at base as one v2 batch of producer with
// attrs, compressed with codec, as a broker stores a producer's batch.
func producedBatch(t testing.TB, codec compress.Compression, base, producer int64, attrs int16, n int) []byte {
	t.Helper()
	at := time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
	recs := make([]protocol.Record, n)
	for i := range recs {
		recs[i] = protocol.Record{Time: at, Value: protocol.NewBytes(fmt.Appendf(nil, `{"event_id":"e-%d"}`, base+int64(i)))}
	}
	return withProducer(encodeBatch(t, 2, codec, base, recs...), producer, attrs)
}

// withProducer sets a v2 batch's producer id and attributes (beside its
// codec), and its checksum after them.
func withProducer(b []byte, producer int64, attrs int16) []byte {
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|uint16(attrs))
	binary.BigEndian.PutUint64(b[43:], uint64(producer))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// txn is a transactional batch of n records of producer at base.
func txn(t testing.TB, base, producer int64, n int) []byte {
	return producedBatch(t, compress.None, base, producer, attrTransactional, n)
}

// marker is producer's COMMIT or ABORT marker at offset at, as the
// transaction coordinator has the broker write it: a control batch of one
// record, key version 0 and type, value version 0 and coordinator epoch.
func marker(t testing.TB, at, producer int64, abort bool) []byte {
	t.Helper()
	typ := uint16(1)
	if abort {
		typ = 0
	}
	key := binary.BigEndian.AppendUint16([]byte{0, 0}, typ)
	value := binary.BigEndian.AppendUint32([]byte{0, 0}, 7)
	b := encodeBatch(t, 2, compress.None, at, protocol.Record{Time: time.UnixMilli(1), Key: protocol.NewBytes(key), Value: protocol.NewBytes(value)})
	return withProducer(b, producer, attrTransactional|attrControl)
}

// abortedList is the aborted transactions of a Fetch response as sent.
func abortedList(txns ...AbortedTransaction) []byte {
	var b []byte
	for _, x := range txns {
		b = binary.BigEndian.AppendUint64(b, uint64(x.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(x.FirstOffset))
	}
	return b
}

// delivered walks data as the fetcher does under read_committed, from
// offset from on, and returns the offsets of the records it delivers.
func delivered(t *testing.T, data []byte, from int64, aborted ...AbortedTransaction) ([]int64, error) {
	t.Helper()
	var a Aborts
	a.Reset(&FetchPartition{aborted: abortedList(aborted...)})
	r := NewReader(1<<20, 1<<20)
	defer r.Close()
	var out []int64
	for len(data) > 0 {
		b, rest, ok, err := NextBatch(data)
		if err != nil || !ok {
			t.Fatalf("batch: ok %v, %v", ok, err)
		}
		data = rest
		skip, err := a.Aborted(&b)
		if err != nil {
			return out, err
		}
		if skip || b.Control() || b.Last < from {
			continue
		}
		if err := r.Open(&b); err != nil {
			t.Fatal(err)
		}
		var rec Record
		for {
			ok, err := r.Next(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if rec.Offset >= from {
				out = append(out, rec.Offset)
			}
		}
	}
	return out, nil
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

// Records of aborted transactions are not delivered, whatever else is
// interleaved with them: another producer's committed transaction, the
// same producer's next transaction after its ABORT marker, producers
// outside transactions (none, and idempotent), and a partition whose
// response begins in the middle of an aborted transaction.
func TestAbortedTransactionsAreSkipped(t *testing.T) {
	const p1, p2, p3 = 1001, 1002, 1003
	log := cat(
		txn(t, 0, p1, 3),        // 0-2: p1, aborted
		txn(t, 3, p2, 2),        // 3-4: p2, committed
		txn(t, 5, p1, 1),        // 5: p1, aborted
		marker(t, 6, p2, false), // 6: p2 COMMIT
		marker(t, 7, p1, true),  // 7: p1 ABORT
		txn(t, 8, p1, 2),        // 8-9: p1's next transaction, committed
		producedBatch(t, compress.Zstd, 10, -1, 0, 2), // 10-11: no producer id
		marker(t, 12, p1, false),                      // 12: p1 COMMIT
		producedBatch(t, compress.Lz4, 13, p3, 0, 2),  // 13-14: idempotent, outside transactions
		txn(t, 15, p2, 2),                             // 15-16: p2, aborted
		marker(t, 17, p2, true),                       // 17: p2 ABORT
	)
	aborted := []AbortedTransaction{{ProducerID: p1, FirstOffset: 0}, {ProducerID: p2, FirstOffset: 15}}
	want := []int64{3, 4, 8, 9, 10, 11, 13, 14}
	cases := []struct {
		name    string
		data    []byte
		from    int64
		aborted []AbortedTransaction
		want    []int64
	}{
		{"whole", log, 0, aborted, want},
		// The list in another order than the offsets': it is sorted.
		{"list unsorted", log, 0, []AbortedTransaction{aborted[1], aborted[0]}, want},
		// A fetch from offset 5: the broker lists p1's transaction begun at
		// 0, and the response's first batch is p1's, mid-transaction.
		{"begins mid-transaction", cat(txn(t, 5, p1, 1), log[len(cat(txn(t, 0, p1, 3), txn(t, 3, p2, 2), txn(t, 5, p1, 1))):]), 5, aborted, want[2:]},
		// A response whose last batch holds the offset asked for (a
		// compressed batch is returned whole): offsets before it are
		// walked for the markers and not delivered.
		{"batch before the offset asked for", log, 9, aborted, want[3:]},
		// Cut short before p1's ABORT: the rest is fetched again, its
		// response lists p1's transaction again.
		{"cut before the marker", log[:len(cat(txn(t, 0, p1, 3), txn(t, 3, p2, 2), txn(t, 5, p1, 1), marker(t, 6, p2, false)))], 0, aborted, want[:2]},
		// read_uncommitted: no list, every record delivered.
		{"no aborted transactions", log, 0, nil, []int64{0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 13, 14, 15, 16}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := delivered(t, c.data, c.from, c.aborted...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("delivered %v, want %v", got, c.want)
			}
		})
	}
}

// A producer that aborts twice in one response, with a committed
// transaction between: each aborted transaction runs from its first offset
// to its own ABORT marker, and the committed one before an aborted
// transaction's first offset is delivered.
func TestProducerAbortsTwice(t *testing.T) {
	const p = 7
	log := cat(
		txn(t, 0, p, 2), marker(t, 2, p, false), // committed
		txn(t, 3, p, 2), marker(t, 5, p, true), // aborted
		txn(t, 6, p, 1), marker(t, 7, p, false), // committed
		txn(t, 8, p, 3), marker(t, 11, p, true), // aborted
		txn(t, 12, p, 1), // open: delivered only if committed, which read_committed's LSO decides
	)
	got, err := delivered(t, log, 0, AbortedTransaction{p, 8}, AbortedTransaction{p, 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 1, 6, 12}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
}

// A control batch whose marker cannot be read, of a producer whose aborted
// transaction it may end, is a corrupt batch: neither delivered as the
// end of the abort nor taken as its continuation.
func TestUnreadableMarker(t *testing.T) {
	const p = 9
	bad := encodeBatch(t, 2, compress.Gzip, 2, protocol.Record{Key: protocol.NewBytes([]byte{0, 0, 0, 0})})
	_, err := delivered(t, cat(txn(t, 0, p, 2), withProducer(bad, p, attrTransactional|attrControl)), 0, AbortedTransaction{p, 0})
	if !errors.Is(err, errCorrupt) {
		t.Errorf("compressed marker: %v, want a corrupt batch", err)
	}
	// Of a producer with no aborted transaction open, its type does not
	// matter: it is skipped as any control batch.
	got, err := delivered(t, cat(txn(t, 0, p, 2), withProducer(bad, p, attrTransactional|attrControl)), 0)
	if err != nil || !slices.Equal(got, []int64{0, 1}) {
		t.Errorf("delivered %v, %v; want [0 1]", got, err)
	}
}

// fetchResponseBody encodes the body of a Fetch response of version with
// one partition, as a broker sends it.
func fetchResponseBody(version int16, hw, lso int64, aborted []byte, records []byte) []byte {
	var b []byte
	be := binary.BigEndian
	b = be.AppendUint32(b, 0) // throttle
	if version >= 7 {
		b = be.AppendUint16(b, 0)
		b = be.AppendUint32(b, 0) // session id
	}
	b = be.AppendUint32(b, 1)
	b = be.AppendUint16(b, 6)
	b = append(b, "clicks"...)
	b = be.AppendUint32(b, 1)
	b = be.AppendUint32(b, 3) // partition
	b = be.AppendUint16(b, 0) // error
	b = be.AppendUint64(b, uint64(hw))
	b = be.AppendUint64(b, uint64(lso))
	if version >= 5 {
		b = be.AppendUint64(b, 0) // log start
	}
	if aborted == nil {
		b = be.AppendUint32(b, 0xffffffff) // null
	} else {
		b = be.AppendUint32(b, uint32(len(aborted)/abortedSize))
		b = append(b, aborted...)
	}
	if version >= 11 {
		b = be.AppendUint32(b, 0xffffffff) // preferred read replica
	}
	b = be.AppendUint32(b, uint32(len(records)))
	return append(b, records...)
}

// The response's last stable offset and aborted transactions are read, in
// every version the worker may speak; a null list is none.
func TestFetchResponseTransactions(t *testing.T) {
	records := txn(t, 40, 5, 2)
	list := abortedList(AbortedTransaction{5, 40}, AbortedTransaction{6, 12})
	for _, version := range []int16{4, 5, 7, 11} {
		for _, aborted := range [][]byte{list, nil} {
			res, err := parseFetchResponse(fetchResponseBody(version, 50, 42, aborted, records), version)
			if err != nil {
				t.Fatalf("v%d: %v", version, err)
			}
			p := res.Partitions[0]
			if p.HighWatermark != 50 || p.LastStableOffset != 42 || string(p.Records) != string(records) || string(p.aborted) != string(aborted) {
				t.Errorf("v%d: hw %d, lso %d, aborted %x, %d bytes of records", version, p.HighWatermark, p.LastStableOffset, p.aborted, len(p.Records))
			}
		}
	}
	// A list longer than the response: broken, not an allocation.
	body := fetchResponseBody(11, 50, 42, list, records)
	if _, err := parseFetchResponse(body[:len(body)-len(records)-4-4-len(list)+8], 11); err == nil {
		t.Error("a truncated list of aborted transactions was read")
	}
}
