package kwire

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Record is one record of a batch, its fields pointing into the batch or
// into the reader's buffers: valid until the next record is read.
type Record struct {
	Offset int64
	Time   int64 // milliseconds; -1 when the record has none
	// Key and Value are nil when the record has none.
	Key, Value []byte
	// Headers is the record's headers as encoded, NumHeaders of them (a
	// legacy message has none): see ReadHeaders.
	Headers    []byte
	NumHeaders int
	// Cut is set when the record was too large to hold whole.
	Cut *Cut
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

// Reader reads the records of one batch at a time. A v2 batch's
// uncompressed records are read where they lie; compressed ones from the
// inflater's stream, one record at a time into a buffer, so memory does not
// grow with the batch. A record larger than maxRecord is never held whole:
// it is handed on cut (see Cut).
type Reader struct {
	inflate   *inflater
	maxRecord int

	b       *Batch
	left    int32         // records still to read, by the batch's count
	src     []byte        // uncompressed records not yet read
	stream  *bufio.Reader // decompressed records of a compressed batch
	scratch []byte        // the record being read from stream
	legacy  []Record      // a legacy batch's messages, read at open
	inner   []byte        // a legacy wrapper's messages, decompressed
	hash    hash.Hash
}

// NewReader returns a reader of batches that may each decompress to at
// most limit bytes (past it, reading fails) and whose
// records larger than maxRecord bytes are cut. A Reader belongs to one
// goroutine; Close lets go of its decompressors.
func NewReader(limit int64, maxRecord int) *Reader {
	return &Reader{inflate: newInflater(limit), maxRecord: maxRecord, stream: bufio.NewReaderSize(nil, 64<<10), hash: sha256.New()}
}

// Close lets go of the decompressors' hold on the last batch.
func (r *Reader) Close() { r.inflate.close() }

// Open starts reading b. A legacy wrapper message is decompressed here;
// its first offset is then known.
func (r *Reader) Open(b *Batch) error {
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

// Next reads the next record into rec; ok is false at the batch's end.
func (r *Reader) Next(rec *Record) (ok bool, err error) {
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
func (r *Reader) parse(body []byte, rec *Record) error {
	d := varints{b: body}
	d.skip(1) // attributes
	ts := d.varint()
	off := d.varint()
	rec.Key = d.bytes()
	rec.Value = d.bytes()
	n := d.varint()
	rec.Headers, rec.NumHeaders, rec.Cut = d.b, int(n), nil
	if d.err != nil || n < 0 {
		return fmt.Errorf("record at offset delta %d: %w", off, errShort)
	}
	rec.Offset = r.b.First + off
	rec.Time = r.b.recordTime(ts)
	return nil
}

// cutInMemory cuts a record that lies whole in the response, as readCut
// does one read from a stream.
func (r *Reader) cutInMemory(rec *Record) {
	c := &Cut{Size: int64(len(rec.Value)), SHA256: sha256.Sum256(rec.Value)}
	rec.Value = rec.Value[:min(len(rec.Value), r.maxRecord)]
	if len(rec.Key) > keptPart {
		rec.Key, c.Dropped = nil, "key"
	}
	if len(rec.Headers) > keptPart {
		rec.Headers, rec.NumHeaders = nil, 0
		c.Dropped = join(c.Dropped, "headers")
	}
	rec.Cut = c
}

// readCut reads a record of size bytes, more than maxRecord, from rd: its
// key if it is at most keptPart, the first maxRecord bytes of its value and
// the hash of all of it, its headers if they are at most keptPart.
func (r *Reader) readCut(rd io.Reader, size int64, rec *Record) error {
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
	*rec = Record{Offset: r.b.First + off, Time: r.b.recordTime(ts), Key: key, Value: value, Headers: headers, NumHeaders: nheaders, Cut: c}
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
func (r *Reader) openLegacy() error {
	b := r.b
	if b.codec() == codecNone {
		r.legacy = append(r.legacy, Record{Offset: b.First, Time: b.time, Key: b.key, Value: b.value})
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
		m, next, ok, err := NextBatch(rest)
		if err != nil {
			return err
		}
		if !ok || m.magic > 1 {
			return fmt.Errorf("legacy compressed message at offset %d: %w", b.First, errShort)
		}
		rest = next
		// Under LogAppendTime the broker stamps the wrapper alone; the
		// messages inside keep the producer's times.
		t := m.time
		if b.logAppendTime() {
			t = b.appendTime
		}
		r.legacy = append(r.legacy, Record{Offset: m.First, Time: t, Key: m.key, Value: m.value})
	}
	if b.magic == 1 && len(r.legacy) > 0 {
		// Magic 1 numbers the wrapped messages from 0; the wrapper holds
		// the offset of the last.
		lastRel := r.legacy[len(r.legacy)-1].Offset
		for i := range r.legacy {
			r.legacy[i].Offset = b.Last - lastRel + r.legacy[i].Offset
		}
	}
	if len(r.legacy) > 0 {
		b.First = r.legacy[0].Offset
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
func (r *Reader) cutLegacy() error {
	for i := range r.legacy {
		if len(r.legacy[i].Key)+len(r.legacy[i].Value) > r.maxRecord {
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

// ReadHeaders calls fn with the key and value of each of the record's
// headers, in order. They point into the record (valid until the next
// record is read); a header's value is nil when it is null.
func (rec *Record) ReadHeaders(fn func(key, value []byte)) error {
	if rec.NumHeaders > len(rec.Headers) { // each takes at least two bytes
		return errShort
	}
	d := varints{b: rec.Headers}
	for range rec.NumHeaders {
		k := d.bytes()
		v := d.bytes()
		if d.err != nil {
			return d.err
		}
		fn(k, v)
	}
	return nil
}
