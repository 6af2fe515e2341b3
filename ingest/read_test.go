package ingest

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/ingest/kwire"
)

// legacyWrapper encodes records as one legacy (magic 1) message compressed
// with codec, wrapping them at offsets base on, as kafka-go's producer
// writes it: the wrapper's own offset is its last message's.
func legacyWrapper(t *testing.T, codec compress.Compression, base int64, recs ...protocol.Record) []byte {
	t.Helper()
	rs := protocol.RecordSet{Version: 1, Attributes: protocol.Attributes(codec), Records: protocol.NewRecordReader(recs...)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:] // the record set's size
	binary.BigEndian.PutUint64(b, uint64(base+int64(len(recs)-1)))
	return b
}

// recordBatch encodes recs as one v2 record batch compressed with codec, at
// base offset base, of producer (-1 for none) and with the attributes in
// attrs beside the codec (kwire's transactional and control bits), as a
// broker stores it.
func recordBatch(tb testing.TB, codec compress.Compression, base, producer int64, attrs int16, recs ...protocol.Record) []byte {
	tb.Helper()
	rs := protocol.RecordSet{Version: 2, Attributes: protocol.Attributes(codec), Records: protocol.NewRecordReader(recs...)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		tb.Fatal(err)
	}
	b := buf.Bytes()[4:] // the record set's size
	binary.BigEndian.PutUint64(b, uint64(base))
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|uint16(attrs))
	binary.BigEndian.PutUint64(b[43:], uint64(producer))
	binary.BigEndian.PutUint32(b[17:], crcOf(b[21:]))
	return b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcOf is a v2 batch's checksum of b, its bytes from the attributes on.
func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Regression (review): a legacy compressed message that cannot be opened
// was dead-lettered as its own offset alone, which is its last inner
// message's, while the commit moved past the ones before it. It stands for
// every offset from the partition's position to it.
func TestUndecodableLegacyWrapperCoversItsMessages(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
	data := legacyWrapper(t, compress.Zstd, 100,
		protocol.Record{Time: at, Value: protocol.NewBytes([]byte(`{"event_id":"e1"}`))},
		protocol.Record{Time: at, Key: protocol.NewBytes([]byte{}), Value: protocol.NewBytes([]byte{})},
		protocol.Record{Time: at, Key: protocol.NewBytes([]byte("k3"))})
	data[len(data)-3] ^= 0xff                                            // break the compressed value...
	binary.BigEndian.PutUint32(data[12:], crc32.ChecksumIEEE(data[16:])) // ...behind a valid checksum
	tr := newTracker()
	p := newPartition(0, tr.Assign(map[int]int64{0: 100})[0], 100)
	f := &fetcher{topic: "t", tracker: tr, chunks: newChunks(), log: quiet, records: kwire.NewReader(1<<20, 1<<20),
		m: &consumerMetrics{undecodable: noop.Int64Counter{}, fetchErrors: noop.Int64Counter{}, aborted: noop.Int64Counter{}}}
	defer f.records.Close()
	rs := readState{reserved: 1 << 20}
	if err := f.read(context.Background(), p, data, &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs.batch) != 1 || rs.batch[0].Undecodable == nil {
		t.Fatalf("read %+v, want one undecodable message", rs.batch)
	}
	if m, u := rs.batch[0].Msg, rs.batch[0].Undecodable; m.Offset != 100 || u.Last != 102 || p.next != 103 {
		t.Errorf("undecodable offsets %d to %d, next %d; want 100 to 102, next 103", m.Offset, u.Last, p.next)
	}
}

// The fetcher asks for the newest Fetch version both kafka-go's connection
// negotiated and kwire reads: a kafka-go that learns a newer version keeps
// fetching, at the newest version read here, instead of every fetch being
// refused.
func TestFetchVersionHeldToWhatKwireReads(t *testing.T) {
	t.Parallel()
	for negotiated, want := range map[int16]int16{kwire.MaxFetchVersion + 2: kwire.MaxFetchVersion, kwire.MaxFetchVersion: kwire.MaxFetchVersion, 7: 7} {
		r := &fetchRequest{}
		r.Required(map[protocol.ApiKey]int16{protocol.Fetch: negotiated})
		if r.version != want {
			t.Errorf("negotiated v%d: the request asks for v%d, want v%d", negotiated, r.version, want)
		}
	}
}
