package ingest

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// The record formats a partition's fetched bytes hold: record batches
// (magic 2, Kafka 0.11+) and the legacy messages of magic 0 and 1, which
// brokers since Kafka 3.0 no longer write but may still hold from before.
// The magic byte sits at the same place in all three.
const (
	magicOffset = 16
	// batchHeader is a v2 record batch's header, up to its records.
	batchHeader = 61
	// keptPart is the most of a key, or of headers, that a record too
	// large to hold keeps.
	keptPart = 64 << 10
)

// recordBatch is one record batch of a partition's fetched bytes, or one
// legacy message (which may wrap a compressed set of messages).
type recordBatch struct {
	magic int8
	// first and last are the offsets it holds. A legacy wrapper message's
	// own offset is that of the last message inside it: first is known
	// once the batch is opened.
	first, last int64
	attrs       int16
	// raw is the batch as it came from the broker.
	raw []byte
	// v2: the base timestamp and the records, compressed or not.
	baseTime int64
	records  []byte
	count    int32
	// Legacy: the message's timestamp, key and value.
	time       int64
	key, value []byte
}

func (b *recordBatch) codec() int8 { return int8(b.attrs & 0x07) }

// control reports a batch of transaction markers: nothing to deliver.
func (b *recordBatch) control() bool { return b.magic == 2 && b.attrs&0x20 != 0 }

// errCorrupt is a batch whose checksum or framing is wrong: a broker or
// disk fault, not something a producer can send (the broker checks every
// batch it takes). It is fetched again, with backoff, and said.
var errCorrupt = errors.New("corrupt record batch")

// nextBatch splits the first batch off b. ok is false when b does not hold
// a whole one: the response's size limit cut it, and it is fetched again.
func nextBatch(b []byte) (batch recordBatch, rest []byte, ok bool, err error) {
	if len(b) < magicOffset+1 {
		return batch, nil, false, nil
	}
	size := int64(int32(binary.BigEndian.Uint32(b[8:])))
	if size < magicOffset-12+1 {
		return batch, nil, false, fmt.Errorf("%w: length %d at offset %d", errCorrupt, size, int64(binary.BigEndian.Uint64(b)))
	}
	end := 12 + size
	if end > int64(len(b)) {
		return batch, nil, false, nil
	}
	raw := b[:end:end]
	batch.raw, batch.magic = raw, int8(raw[magicOffset])
	switch batch.magic {
	case 2:
		err = batch.parseV2()
	case 0, 1:
		err = batch.parseLegacy()
	default:
		err = fmt.Errorf("%w: magic %d at offset %d", errCorrupt, batch.magic, int64(binary.BigEndian.Uint64(raw)))
	}
	if err != nil {
		return batch, nil, false, err
	}
	return batch, b[end:], true, nil
}

func (b *recordBatch) parseV2() error {
	raw := b.raw
	b.first = int64(binary.BigEndian.Uint64(raw))
	if len(raw) < batchHeader {
		return fmt.Errorf("%w: batch of %d bytes at offset %d", errCorrupt, len(raw), b.first)
	}
	if crc := binary.BigEndian.Uint32(raw[17:]); crc32.Checksum(raw[21:], castagnoli) != crc {
		return fmt.Errorf("%w: checksum mismatch at offset %d", errCorrupt, b.first)
	}
	b.attrs = int16(binary.BigEndian.Uint16(raw[21:]))
	b.last = b.first + int64(int32(binary.BigEndian.Uint32(raw[23:])))
	b.baseTime = int64(binary.BigEndian.Uint64(raw[27:]))
	b.count = int32(binary.BigEndian.Uint32(raw[57:]))
	b.records = raw[batchHeader:]
	return nil
}

func (b *recordBatch) parseLegacy() error {
	raw := b.raw
	b.first = int64(binary.BigEndian.Uint64(raw))
	b.last = b.first
	d := wire{b: raw[12:]}
	crc := uint32(d.int32())
	if d.err == nil && crc32.ChecksumIEEE(d.b) != crc {
		return fmt.Errorf("%w: checksum mismatch at offset %d", errCorrupt, b.first)
	}
	d.skip(1) // magic
	if attrs := d.bytes(1); attrs != nil {
		b.attrs = int16(attrs[0])
	}
	b.time = -1
	if b.magic == 1 {
		b.time = d.int64()
	}
	b.key = d.nullableBytes()
	b.value = d.nullableBytes()
	if d.err != nil {
		return fmt.Errorf("%w: message at offset %d: %w", errCorrupt, b.first, d.err)
	}
	return nil
}

// nullableBytes reads bytes after an int32 length, nil when it is -1.
func (d *wire) nullableBytes() []byte {
	n := d.int32()
	if n < 0 {
		return nil
	}
	return d.bytes(int(n))
}

// record is one record of a batch, its fields pointing into the batch or
// into the reader's buffers: valid until the next record is read.
type record struct {
	offset int64
	time   int64 // milliseconds; -1 when the record has none
	// key and value are nil when the record has none.
	key, value []byte
	// headers is the record's headers as encoded, n of them (a legacy
	// message has none).
	headers  []byte
	nheaders int
	// cut is set when the record was too large to hold whole.
	cut *Cut
}

// Cut describes a record too large to hold whole: the value handed on is
// its first bytes, and a key or headers of more than 64 KiB are left out.
type Cut struct {
	// Size is the value's length and SHA256 its hash, of all of it.
	Size   int64
	SHA256 [sha256.Size]byte
	// Dropped says what else was left out: "", "key", "headers" or
	// "headers,key".
	Dropped string
}

// recordReader reads the records of one batch at a time. A v2 batch's
// uncompressed records are read where they lie; compressed ones from the
// inflater's stream, one record at a time into a buffer, so memory does not
// grow with the batch. A record larger than maxRecord is never held whole:
// it is handed on cut (see Cut).
type recordReader struct {
	inflate   *inflater
	maxRecord int

	b       *recordBatch
	left    int32         // records still to read, by the batch's count
	src     []byte        // uncompressed records not yet read
	stream  *bufio.Reader // decompressed records of a compressed batch
	scratch []byte        // the record being read from stream
	legacy  []record      // a legacy batch's messages, read at open
	inner   []byte        // a legacy wrapper's messages, decompressed
	hash    hash.Hash
}

func newRecordReader(inflate *inflater, maxRecord int) *recordReader {
	return &recordReader{inflate: inflate, maxRecord: maxRecord, stream: bufio.NewReaderSize(nil, 64<<10), hash: sha256.New()}
}

// open starts reading b. A legacy wrapper message is decompressed here;
// its first offset is then known.
func (r *recordReader) open(b *recordBatch) error {
	r.b, r.left, r.src, r.legacy = b, b.count, nil, r.legacy[:0]
	if b.magic < 2 {
		return r.openLegacy()
	}
	if b.codec() == codecNone {
		r.src = b.records
		return nil
	}
	s, err := r.inflate.open(b.codec(), b.records)
	if err != nil {
		return err
	}
	r.stream.Reset(s)
	return nil
}

// next reads the next record; ok is false at the batch's end.
func (r *recordReader) next(rec *record) (ok bool, err error) {
	if r.b.magic < 2 {
		if len(r.legacy) == 0 {
			return false, nil
		}
		*rec, r.legacy = r.legacy[0], r.legacy[1:]
		return true, nil
	}
	if r.left <= 0 {
		return false, nil
	}
	r.left--
	if r.b.codec() == codecNone {
		n, k := binary.Varint(r.src)
		if k <= 0 || n < 0 || n > int64(len(r.src)-k) {
			return false, fmt.Errorf("record framing: %w", errShort)
		}
		body := r.src[k : k+int(n)]
		r.src = r.src[k+int(n):]
		if err := r.parse(body, rec); err != nil {
			return false, err
		}
		if n > int64(r.maxRecord) {
			r.cutInMemory(rec)
		}
		return true, nil
	}
	n, err := binary.ReadVarint(r.stream)
	if err != nil {
		return false, streamErr(err)
	}
	if n < 0 {
		return false, fmt.Errorf("record framing: length %d", n)
	}
	if n > int64(r.maxRecord) {
		return true, r.readCut(io.LimitReader(r.stream, n), n, rec)
	}
	if cap(r.scratch) < int(n) {
		r.scratch = make([]byte, n, max(n, 4<<10))
	}
	body := r.scratch[:n]
	if _, err := io.ReadFull(r.stream, body); err != nil {
		return false, streamErr(err)
	}
	return true, r.parse(body, rec)
}

// parse reads the fields of a v2 record of body.
func (r *recordReader) parse(body []byte, rec *record) error {
	d := varints{b: body}
	d.skip(1) // attributes
	ts := d.varint()
	off := d.varint()
	rec.key = d.bytes()
	rec.value = d.bytes()
	n := d.varint()
	rec.headers, rec.nheaders, rec.cut = d.b, int(n), nil
	if d.err != nil || n < 0 {
		return fmt.Errorf("record at offset delta %d: %w", off, errShort)
	}
	rec.offset = r.b.first + off
	rec.time = r.b.baseTime + ts
	return nil
}

// cutInMemory cuts a record that lies whole in the response, as readCut
// does one read from a stream.
func (r *recordReader) cutInMemory(rec *record) {
	c := &Cut{Size: int64(len(rec.value)), SHA256: sha256.Sum256(rec.value)}
	rec.value = rec.value[:min(len(rec.value), r.maxRecord)]
	if len(rec.key) > keptPart {
		rec.key, c.Dropped = nil, "key"
	}
	if len(rec.headers) > keptPart {
		rec.headers, rec.nheaders = nil, 0
		c.Dropped = join(c.Dropped, "headers")
	}
	rec.cut = c
}

// readCut reads a record of size bytes, more than maxRecord, from rd: its
// key if it is at most keptPart, the first maxRecord bytes of its value and
// the hash of all of it, its headers if they are at most keptPart.
func (r *recordReader) readCut(rd io.Reader, size int64, rec *record) error {
	br := byteReader{r: rd}
	var one [1]byte
	if _, err := io.ReadFull(rd, one[:]); err != nil { // attributes
		return streamErr(err)
	}
	ts, err1 := binary.ReadVarint(br)
	off, err2 := binary.ReadVarint(br)
	klen, err3 := binary.ReadVarint(br)
	if err := errors.Join(err1, err2, err3); err != nil {
		return streamErr(err)
	}
	c := &Cut{}
	// The buffer holds the key, the value's first bytes and the headers.
	if cap(r.scratch) < r.maxRecord+2*keptPart {
		r.scratch = make([]byte, 0, r.maxRecord+2*keptPart)
	}
	buf := r.scratch[:0]
	var key []byte
	switch {
	case klen < 0:
	case klen <= keptPart:
		buf = buf[:klen]
		if _, err := io.ReadFull(rd, buf); err != nil {
			return streamErr(err)
		}
		key = buf
	default:
		if _, err := io.CopyN(io.Discard, rd, klen); err != nil {
			return streamErr(err)
		}
		c.Dropped = "key"
	}
	vlen, err := binary.ReadVarint(br)
	if err != nil || vlen < -1 {
		return fmt.Errorf("record too large to hold: value length: %w", errShort)
	}
	var value []byte
	if vlen >= 0 {
		start := len(buf)
		keep := min(vlen, int64(r.maxRecord))
		buf = buf[:start+int(keep)]
		value = buf[start:]
		if _, err := io.ReadFull(rd, value); err != nil {
			return streamErr(err)
		}
		r.hash.Reset()
		r.hash.Write(value)
		if _, err := io.CopyN(r.hash, rd, vlen-keep); err != nil {
			return streamErr(err)
		}
		r.hash.Sum(c.SHA256[:0])
		c.Size = vlen
	}
	// What is left is the headers: a count, then each header.
	rest := size - 1 - int64(varintLen(ts)+varintLen(off)+varintLen(klen)+varintLen(vlen)) - max(klen, 0) - max(vlen, 0)
	var headers []byte
	nheaders := 0
	if rest <= keptPart {
		start := len(buf)
		buf = buf[:start+int(rest)]
		if _, err := io.ReadFull(rd, buf[start:]); err != nil {
			return streamErr(err)
		}
		n, k := binary.Varint(buf[start:])
		if k <= 0 || n < 0 {
			return fmt.Errorf("record too large to hold: headers: %w", errShort)
		}
		headers, nheaders = buf[start+k:], int(n)
	} else {
		if _, err := io.CopyN(io.Discard, rd, rest); err != nil {
			return streamErr(err)
		}
		c.Dropped = join(c.Dropped, "headers")
	}
	*rec = record{offset: r.b.first + off, time: r.b.baseTime + ts, key: key, value: value, headers: headers, nheaders: nheaders, cut: c}
	return nil
}

func join(dropped, what string) string {
	if dropped == "" {
		return what
	}
	return what + "," + dropped
}

// openLegacy reads the messages of a legacy batch: the message itself, or
// the messages a compressed one wraps, decompressed whole (within
// inflateWindow: brokers since Kafka 3.0 write no such batches, so they are
// old and few).
func (r *recordReader) openLegacy() error {
	b := r.b
	if b.codec() == codecNone {
		r.legacy = append(r.legacy, record{offset: b.first, time: b.time, key: b.key, value: b.value})
		return r.cutLegacy()
	}
	if b.value == nil {
		return nil
	}
	s, err := r.inflate.open(b.codec(), b.value)
	if err != nil {
		return err
	}
	var err2 error
	if r.inner, err2 = readAtMost(s, r.inner[:0], inflateWindow+1); err2 != nil {
		return err2
	}
	if len(r.inner) > inflateWindow {
		return fmt.Errorf("a legacy compressed message of more than %d bytes, the most one may: %w", inflateWindow, errBatchTooLarge)
	}
	for rest := r.inner; len(rest) > 0; {
		m, next, ok, err := nextBatch(rest)
		if err != nil {
			return err
		}
		if !ok || m.magic > 1 {
			return fmt.Errorf("legacy compressed message at offset %d: %w", b.first, errShort)
		}
		rest = next
		r.legacy = append(r.legacy, record{offset: m.first, time: m.time, key: m.key, value: m.value})
	}
	if b.magic == 1 && len(r.legacy) > 0 {
		// Magic 1 numbers the wrapped messages from 0; the wrapper holds
		// the offset of the last.
		lastRel := r.legacy[len(r.legacy)-1].offset
		for i := range r.legacy {
			r.legacy[i].offset = b.last - lastRel + r.legacy[i].offset
		}
	}
	if len(r.legacy) > 0 {
		b.first = r.legacy[0].offset
	}
	return r.cutLegacy()
}

// readAtMost reads r into buf until it ends or holds n bytes, growing buf
// by doubling but never past n.
func readAtMost(r io.Reader, buf []byte, n int) ([]byte, error) {
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), 4<<10), n))
			copy(grown, buf)
			buf = grown
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// cutLegacy cuts the legacy messages too large to hold.
func (r *recordReader) cutLegacy() error {
	for i := range r.legacy {
		if len(r.legacy[i].key)+len(r.legacy[i].value) > r.maxRecord {
			r.cutInMemory(&r.legacy[i])
		}
	}
	return nil
}

// streamErr is a decompressed stream's error as the reader reports it.
func streamErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("records end before the batch says: %w", errShort)
	}
	return err
}

// varints reads the zig-zag varints and varint-prefixed bytes of a v2
// record; the first error sticks.
type varints struct {
	b   []byte
	err error
}

func (d *varints) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = errShort, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *varints) skip(n int) {
	if d.err == nil && len(d.b) < n {
		d.err, d.b = errShort, nil
	}
	if d.err == nil {
		d.b = d.b[n:]
	}
}

// bytes reads varint-prefixed bytes, nil for a length of -1.
func (d *varints) bytes() []byte {
	n := d.varint()
	if d.err != nil || n < 0 {
		if n < -1 {
			d.err = errShort
		}
		return nil
	}
	if n > int64(len(d.b)) {
		d.err, d.b = errShort, nil
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

// byteReader reads one byte at a time from r, for binary.ReadVarint.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	_, err := io.ReadFull(b.r, one[:])
	return one[0], err
}
