package kwire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/protocol"
)

// encodeBatch encodes records as one record set of the format version (1:
// legacy messages, 2: a record batch) with codec, at base offset base, as
// kafka-go's producer writes them.
func encodeBatch(t testing.TB, version int8, codec compress.Compression, base int64, recs ...protocol.Record) []byte {
	t.Helper()
	rs := protocol.RecordSet{Version: version, Attributes: protocol.Attributes(codec), Records: protocol.NewRecordReader(recs...)}
	var buf bytes.Buffer
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[4:] // the record set's size
	if version == 2 || codec != compress.None {
		binary.BigEndian.PutUint64(b, uint64(base+int64(len(recs)-1)*int64(version&1))) // v1 wrapper: its last offset
		if version == 2 {
			binary.BigEndian.PutUint64(b, uint64(base))
		}
		return b
	}
	// Uncompressed legacy messages: one per record, each with its offset.
	for off, rest := base, b; len(rest) > 0; off++ {
		binary.BigEndian.PutUint64(rest, uint64(off))
		rest = rest[12+binary.BigEndian.Uint32(rest[8:]):]
	}
	return b
}

// msg is a record as the worker's messages hold it.
type msg struct {
	Offset     int64
	Key, Value []byte
	Headers    []hdr
	Time       time.Time
}

type hdr struct {
	Key   string
	Value []byte
}

// toMsg copies a record out as the worker's fetcher does.
func toMsg(rec *Record) (msg, error) {
	m := msg{Offset: rec.Offset}
	if rec.Key != nil {
		m.Key = bytes.Clone(rec.Key)
	}
	if rec.Value != nil {
		m.Value = bytes.Clone(rec.Value)
	}
	if rec.NumHeaders > 0 {
		err := rec.ReadHeaders(func(k, v []byte) {
			h := hdr{Key: string(k)}
			if v != nil {
				h.Value = bytes.Clone(v)
			}
			m.Headers = append(m.Headers, h)
		})
		if err != nil {
			return m, fmt.Errorf("headers of the record at offset %d: %w", rec.Offset, err)
		}
	}
	if rec.Time != -1 {
		m.Time = time.UnixMilli(rec.Time).UTC()
	}
	return m, nil
}

// decodeOurs reads every message of data as the fetcher does.
func decodeOurs(t testing.TB, data []byte, maxRecord int) ([]msg, []*Cut) {
	t.Helper()
	r := NewReader(1<<30, maxRecord)
	defer r.Close()
	var msgs []msg
	var cuts []*Cut
	for len(data) > 0 {
		b, rest, ok, err := NextBatch(data)
		if err != nil || !ok {
			t.Fatalf("batch: ok %v, %v", ok, err)
		}
		data = rest
		if err := r.Open(&b); err != nil {
			t.Fatalf("open: %v", err)
		}
		var rec Record
		for {
			ok, err := r.Next(&rec)
			if err != nil {
				t.Fatalf("record: %v", err)
			}
			if !ok {
				break
			}
			m, err := toMsg(&rec)
			if err != nil {
				t.Fatal(err)
			}
			msgs, cuts = append(msgs, m), append(cuts, rec.Cut)
		}
	}
	return msgs, cuts
}

// decodeKafkaGo reads data with kafka-go's decoder, which the worker used
// before it read responses itself, into messages as the worker made them.
func decodeKafkaGo(t testing.TB, data []byte) []msg {
	t.Helper()
	framed := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(append(framed, data...))); err != nil {
		t.Fatal(err)
	}
	var out []msg
	for {
		rec, err := rs.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		m := msg{Offset: rec.Offset}
		for _, h := range rec.Headers {
			m.Headers = append(m.Headers, hdr{Key: h.Key, Value: h.Value})
		}
		if rec.Key != nil {
			m.Key, _ = io.ReadAll(rec.Key)
			if m.Key == nil {
				m.Key = []byte{}
			}
		}
		if rec.Value != nil {
			m.Value, _ = io.ReadAll(rec.Value)
			if m.Value == nil {
				m.Value = []byte{}
			}
		}
		if ms := rec.Time.UnixMilli(); ms != -1 {
			m.Time = time.UnixMilli(ms).UTC()
		}
		out = append(out, m)
	}
}

func sameMessage(a, b msg) error {
	switch {
	case a.Offset != b.Offset:
		return fmt.Errorf("offset %d, want %d", a.Offset, b.Offset)
	case !a.Time.Equal(b.Time):
		return fmt.Errorf("offset %d: time %v, want %v", a.Offset, a.Time, b.Time)
	case (a.Key == nil) != (b.Key == nil) || !bytes.Equal(a.Key, b.Key):
		return fmt.Errorf("offset %d: key %q (nil %v), want %q (nil %v)", a.Offset, a.Key, a.Key == nil, b.Key, b.Key == nil)
	case (a.Value == nil) != (b.Value == nil) || !bytes.Equal(a.Value, b.Value):
		return fmt.Errorf("offset %d: value of %d bytes (nil %v), want %d (nil %v)", a.Offset, len(a.Value), a.Value == nil, len(b.Value), b.Value == nil)
	case len(a.Headers) != len(b.Headers):
		return fmt.Errorf("offset %d: %d headers, want %d", a.Offset, len(a.Headers), len(b.Headers))
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) || (a.Headers[i].Value == nil) != (b.Headers[i].Value == nil) {
			return fmt.Errorf("offset %d: header %d %q=%q, want %q=%q", a.Offset, i, a.Headers[i].Key, a.Headers[i].Value, b.Headers[i].Key, b.Headers[i].Value)
		}
	}
	return nil
}

// sampleRecords covers what a record may hold: no key, an empty key, no
// value, an empty value, headers with and without values, no timestamp
// (stamped by the encoder), a long value.
func sampleRecords(withHeaders bool) []protocol.Record {
	at := time.Date(2026, 4, 30, 9, 0, 0, 123_000_000, time.UTC)
	recs := []protocol.Record{
		{Time: at, Value: protocol.NewBytes([]byte(`{"event_id":"e1"}`))},
		{Time: at.Add(time.Second), Key: protocol.NewBytes([]byte{}), Value: protocol.NewBytes([]byte{})},
		{Time: at.Add(-time.Hour), Key: protocol.NewBytes([]byte("k3"))},
		{Time: at.Add(2 * time.Millisecond), Key: protocol.NewBytes([]byte("k4")), Value: protocol.NewBytes(bytes.Repeat([]byte("x"), 70<<10))},
	}
	if withHeaders {
		recs[0].Headers = []protocol.Header{{Key: "tenant", Value: []byte("acme")}, {Key: "empty", Value: []byte{}}, {Key: "null"}}
		recs[3].Headers = []protocol.Header{{Key: "h", Value: []byte("v")}}
	}
	return recs
}

var codecs = []compress.Compression{compress.None, compress.Gzip, compress.Snappy, compress.Lz4, compress.Zstd}

// The fetcher's own decoding reads every format and codec to the very
// messages kafka-go's decoder made of them: a worker of this version
// writes the same cells as one before it for a record fetched again.
func TestDecodingMatchesKafkaGo(t *testing.T) {
	for _, version := range []int8{1, 2} {
		for _, codec := range codecs {
			t.Run(fmt.Sprintf("v%d/%s", version, codec), func(t *testing.T) {
				data := append(encodeBatch(t, version, codec, 100, sampleRecords(version == 2)...),
					encodeBatch(t, version, codec, 104, sampleRecords(version == 2)[:2]...)...)
				ours, cuts := decodeOurs(t, data, 1<<20)
				theirs := decodeKafkaGo(t, data)
				if len(ours) != len(theirs) || len(ours) != 6 {
					t.Fatalf("%d messages, kafka-go %d, want 6", len(ours), len(theirs))
				}
				for i := range ours {
					if err := sameMessage(ours[i], theirs[i]); err != nil {
						t.Error(err)
					}
					if cuts[i] != nil {
						t.Errorf("offset %d cut", ours[i].Offset)
					}
				}
			})
		}
	}
}

// A record larger than the worker holds whole is handed on cut: the first
// bytes of its value, with the size and hash of all of it, its small key
// and headers kept. Compressed (read from a stream) or not, the same.
func TestRecordTooLargeToHoldIsCut(t *testing.T) {
	const maxRecord = 64 << 10
	value := bytes.Repeat([]byte("0123456789"), 50_000) // 500,000 bytes
	for _, codec := range codecs {
		t.Run(codec.String(), func(t *testing.T) {
			data := encodeBatch(t, 2, codec, 7,
				protocol.Record{Time: time.UnixMilli(1), Key: protocol.NewBytes([]byte("key")), Value: protocol.NewBytes(value),
					Headers: []protocol.Header{{Key: "h", Value: []byte("v")}}},
				protocol.Record{Time: time.UnixMilli(2), Value: protocol.NewBytes([]byte("after"))})
			msgs, cuts := decodeOurs(t, data, maxRecord)
			if len(msgs) != 2 {
				t.Fatalf("%d messages, want 2", len(msgs))
			}
			c := cuts[0]
			if c == nil {
				t.Fatal("the large record was not cut")
			}
			if c.Size != int64(len(value)) || c.SHA256 != sha256.Sum256(value) || c.Dropped != "" {
				t.Errorf("cut %+v, want size %d, its hash, nothing dropped", c, len(value))
			}
			m := msgs[0]
			if len(m.Value) != maxRecord || !bytes.Equal(m.Value, value[:maxRecord]) || string(m.Key) != "key" || len(m.Headers) != 1 || m.Offset != 7 {
				t.Errorf("message offset %d, %d bytes of value, key %q, %d headers", m.Offset, len(m.Value), m.Key, len(m.Headers))
			}
			if cuts[1] != nil || string(msgs[1].Value) != "after" || msgs[1].Offset != 8 {
				t.Errorf("the next record: %+v, cut %v", msgs[1], cuts[1])
			}
		})
	}
}

// Every limit has an edge: a record of exactly maxRecord bytes is held
// whole, one byte more is cut.
func TestRecordCutAtTheEdge(t *testing.T) {
	for _, codec := range []compress.Compression{compress.None, compress.Zstd} {
		for _, extra := range []int{0, 1} {
			// A record of maxRecord+extra bytes: attributes, two one-byte
			// deltas, a null key, the value's length (a zig-zag varint of
			// 3 bytes), the value and a header count of 0.
			const maxRecord = 10_000
			vlen := maxRecord - 1 - 1 - 1 - 1 - 3 - 1 + extra
			data := encodeBatch(t, 2, codec, 0, protocol.Record{Time: time.UnixMilli(0), Value: protocol.NewBytes(make([]byte, vlen))})
			_, cuts := decodeOurs(t, data, maxRecord)
			if got := cuts[0] != nil; got != (extra == 1) {
				t.Errorf("%s, record of maxRecord%+d bytes: cut %v", codec, extra, got)
			}
		}
	}
}

// A batch of zeros that decompresses past the limit fails with
// errBatchTooLarge after the records within it, whatever the codec, and
// the reader never holds more than a record.
func TestBatchPastTheLimit(t *testing.T) {
	for _, codec := range codecs[1:] {
		t.Run(codec.String(), func(t *testing.T) {
			recs := make([]protocol.Record, 40)
			for i := range recs {
				recs[i] = protocol.Record{Time: time.UnixMilli(1), Value: protocol.NewBytes(make([]byte, 256<<10))}
			}
			data := encodeBatch(t, 2, codec, 0, recs...)
			r := NewReader(1<<20, 2<<20)
			defer r.Close()
			b, _, ok, err := NextBatch(data)
			if !ok || err != nil {
				t.Fatal(ok, err)
			}
			if err := r.Open(&b); err != nil {
				t.Fatal(err)
			}
			n := 0
			var rec Record
			for {
				ok, err := r.Next(&rec)
				if err != nil {
					if !errors.Is(err, errBatchTooLarge) {
						t.Fatalf("after %d records: %v, want errBatchTooLarge", n, err)
					}
					break
				}
				if !ok {
					t.Fatalf("all %d records read from a batch of 10 MiB with a limit of 1 MiB", n)
				}
				n++
			}
			if n != 3 {
				t.Errorf("%d records read before the limit, want the 3 that lie within 1 MiB", n)
			}
		})
	}
}

// A snappy block that claims a decoded length past the window is refused
// before anything is allocated for it (a header may claim 4 GiB).
func TestSnappyBlockLengthIsChecked(t *testing.T) {
	var s snappyReader
	// A raw block whose varint length claims 1 GiB.
	s.reset(binary.AppendUvarint(nil, 1<<30))
	_, err := io.ReadAll(&s)
	if !errors.Is(err, errBatchTooLarge) {
		t.Errorf("read: %v, want errBatchTooLarge", err)
	}
	if cap(s.buf) != 0 {
		t.Errorf("allocated %d bytes for a block it refused", cap(s.buf))
	}
	// A framed one whose chunk length runs past the data.
	framed := append(append(append([]byte{}, xerialMagic...), make([]byte, 8)...), 0xff, 0xff, 0xff, 0xff, 1, 2)
	s.reset(framed)
	if _, err := io.ReadAll(&s); err == nil || !strings.Contains(err.Error(), "block of") {
		t.Errorf("read: %v, want a block length error", err)
	}
}

// A batch the broker sent with a wrong checksum, and one cut short by the
// response's size, are told apart: the first is an error (fetched again,
// loudly), the second is the normal end of a response.
func TestCorruptAndTruncatedBatches(t *testing.T) {
	data := encodeBatch(t, 2, compress.None, 0, sampleRecords(true)...)
	if _, _, ok, err := NextBatch(data[:len(data)-1]); ok || err != nil {
		t.Errorf("truncated: ok %v, err %v; want neither", ok, err)
	}
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 0xff
	if _, _, _, err := NextBatch(bad); !errors.Is(err, errCorrupt) {
		t.Errorf("corrupt: %v, want errCorrupt", err)
	}
	negative := bytes.Clone(data)
	binary.BigEndian.PutUint32(negative[8:], 0xfffffff0)
	if _, _, _, err := NextBatch(negative); !errors.Is(err, errCorrupt) {
		t.Errorf("negative length: %v, want errCorrupt", err)
	}
}

// No bytes make the decoder panic, loop or allocate without bound.
func FuzzBatches(f *testing.F) {
	for _, version := range []int8{1, 2} {
		for _, codec := range codecs {
			f.Add(encodeBatch(f, version, codec, 5, sampleRecords(version == 2)...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { decodeAll(data) })
}

// Regression (review): a legacy message whose body ends right after its
// magic byte, with a valid checksum, panicked the decoder.
func TestShortLegacyMessage(t *testing.T) {
	msg := make([]byte, 17) // offset, length 5, checksum, magic 1
	binary.BigEndian.PutUint32(msg[8:], 5)
	msg[16] = 1
	binary.BigEndian.PutUint32(msg[12:], crc32.ChecksumIEEE(msg[16:]))
	if _, _, _, err := NextBatch(msg); !errors.Is(err, errCorrupt) {
		t.Errorf("%v, want errCorrupt", err)
	}
}

// fixChecksums sets the checksum of each batch-shaped frame of b, so that
// the fuzzer reaches past the checksum into the batches and records.
func fixChecksums(b []byte) {
	for len(b) >= magicOffset+1 {
		size := int64(int32(binary.BigEndian.Uint32(b[8:])))
		end := 12 + size
		if size < 5 || end > int64(len(b)) {
			return
		}
		switch b[magicOffset] {
		case 2:
			if end >= batchHeader {
				binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:end], castagnoli))
			}
		case 0, 1:
			binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:end]))
		}
		b = b[end:]
	}
}

// The same, with every frame's checksum right: no bytes past it make the
// decoder panic, loop or allocate without bound either.
func FuzzBatchesChecksummed(f *testing.F) {
	for _, version := range []int8{1, 2} {
		for _, codec := range codecs {
			f.Add(encodeBatch(f, version, codec, 5, sampleRecords(version == 2)...))
		}
	}
	f.Add(append(txn(f, 0, 9, 2), marker(f, 2, 9, true)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		fixChecksums(data)
		decodeAll(data)
	})
}

// decodeAll reads every batch and record of data as the fetcher does,
// stopping at the first error.
func decodeAll(data []byte) {
	r := NewReader(4<<20, 64<<10)
	defer r.Close()
	for len(data) > 0 {
		b, rest, ok, err := NextBatch(data)
		if err != nil || !ok {
			return
		}
		data = rest
		if b.Control() {
			_, _ = b.abortMarker() // a marker's key, whatever its bytes
		}
		if err := r.Open(&b); err != nil {
			continue
		}
		var rec Record
		for range 1 << 16 {
			ok, err := r.Next(&rec)
			if err != nil || !ok {
				break
			}
			if _, err := toMsg(&rec); err != nil {
				break
			}
		}
	}
}

// stampAppendTime makes data's batches what a topic of
// message.timestamp.type=LogAppendTime stores: the timestamp type bit set
// and the broker's time as a record batch's max timestamp, or a legacy
// wrapper's own, the records' own times left as produced.
func stampAppendTime(data []byte, at int64) {
	for rest := data; len(rest) >= magicOffset+1; {
		end := 12 + int(binary.BigEndian.Uint32(rest[8:]))
		switch rest[magicOffset] {
		case 2:
			rest[22] |= 0x08 // attributes, low byte
			binary.BigEndian.PutUint64(rest[35:], uint64(at))
		case 1:
			rest[17] |= 0x08
			binary.BigEndian.PutUint64(rest[18:], uint64(at))
		}
		rest = rest[end:]
	}
	fixChecksums(data)
}

// Under LogAppendTime a record's time is the broker's, as Kafka's own
// consumer reads it (the batch's max timestamp, a legacy wrapper's time),
// never the producer's stamp the broker left in the record: a producer
// cannot stamp an event into the future on a topic the broker stamps,
// and a record produced without a time has one.
func TestLogAppendTimeIsTheBrokers(t *testing.T) {
	broker := time.Date(2026, 12, 2, 10, 0, 0, 7_000_000, time.UTC)
	recs := sampleRecords(true)
	recs[0].Time = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		version int8
		codec   compress.Compression
	}{{2, compress.None}, {2, compress.Gzip}, {2, compress.Zstd}, {1, compress.Gzip}, {1, compress.Snappy}}
	for _, c := range cases {
		for _, maxRecord := range []int{1 << 20, 1 << 10} { // whole, and the 70 KiB record cut
			t.Run(fmt.Sprintf("v%d/%s/max%d", c.version, c.codec, maxRecord), func(t *testing.T) {
				created := encodeBatch(t, c.version, c.codec, 100, recs...)
				appended := bytes.Clone(created)
				stampAppendTime(appended, broker.UnixMilli())
				own, _ := decodeOurs(t, created, maxRecord)
				ours, _ := decodeOurs(t, appended, maxRecord)
				if len(ours) != len(recs) || len(own) != len(recs) {
					t.Fatalf("%d and %d messages, want %d", len(ours), len(own), len(recs))
				}
				for i, m := range ours {
					if !m.Time.Equal(broker) {
						t.Errorf("offset %d: time %v, want the broker's %v", m.Offset, m.Time, broker)
					}
					if !own[i].Time.Equal(recs[i].Time.Truncate(time.Millisecond)) {
						t.Errorf("offset %d under CreateTime: time %v, want the producer's %v", own[i].Offset, own[i].Time, recs[i].Time)
					}
				}
			})
		}
	}
}
