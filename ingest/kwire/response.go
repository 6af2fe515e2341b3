// Package kwire reads what a Kafka broker sends in answer to a Fetch
// request: the response's frame and partitions, each partition's record
// batches (magic 2, and the legacy messages of magic 0 and 1), decompressed
// one batch at a time, as streams, within a bound, and their records, cut
// when too large to hold whole; and which batches belong to aborted
// transactions (Aborts), for a reader of committed data only.
//
// It is byte parsing alone: it sends nothing and imports no Kafka client
// and nothing else of cellttl, so that the client the worker sends its
// requests with can change without touching it. A client decodes a whole
// response before returning it, decompressing every record batch in full
// into memory: a response of many small batches, each a few kilobytes of
// zstd on the wire, could hold gigabytes. The worker sends its fetch
// requests through its client and reads the responses with this package.
package kwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The Fetch versions the package reads. v4 (Kafka 0.11) brought record
// batches and the log's last stable offset; v12 brought the flexible
// encoding (compact strings and arrays, tagged fields), which it does not
// parse: a response of another version is refused, never misread.
const (
	MinFetchVersion = 4
	MaxFetchVersion = 11
)

// maxResponseBytes is a sanity bound on a response's size prefix: a broker
// answers within the request's MaxBytes, plus one record batch larger than
// that to make progress.
const maxResponseBytes = 1 << 30

// ReadFetchResponse reads the response to the Fetch request of version and
// correlation id from r, into buf when it is large enough (a buffer of an
// earlier response, reused), and parses its frame: topics and partitions,
// each partition's records left as bytes.
func ReadFetchResponse(r io.Reader, version int16, id int32, buf []byte) (*FetchResponse, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, fmt.Errorf("read fetch response: %w", err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxResponseBytes {
		return nil, fmt.Errorf("fetch response of %d bytes", n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("read fetch response: %w", err)
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != id {
		return nil, fmt.Errorf("fetch response for request %d, want %d", got, id)
	}
	res, err := parseFetchResponse(buf[4:], version)
	if err != nil {
		return nil, fmt.Errorf("fetch response v%d: %w", version, err)
	}
	res.buf = buf
	return res, nil
}

// FetchResponse is a Fetch response as read from the wire.
type FetchResponse struct {
	ErrorCode  int16
	Partitions []FetchPartition
	// buf holds the response, which Records point into.
	buf []byte
}

// Buffer is the buffer the response was read into: once nothing points
// into the response, it may be given to the next ReadFetchResponse.
func (r *FetchResponse) Buffer() []byte { return r.buf }

// FetchPartition is one partition of a Fetch response.
type FetchPartition struct {
	Topic          string
	Partition      int32
	ErrorCode      int16
	HighWatermark  int64
	LogStartOffset int64 // -1 before v5
	// LastStableOffset is the offset of the first record of a transaction
	// still open (the high watermark when none is): a read_committed fetch
	// returns nothing at or past it. -1 when the broker does not know it.
	LastStableOffset int64
	// aborted is the response's list of aborted transactions for the
	// partition, as sent (16 bytes each): see Aborts.
	aborted []byte
	// Records is the partition's record batches as the broker sent them;
	// the last may be cut short by the response's size limit.
	Records []byte
}

// parseFetchResponse parses the body of a Fetch response, of a version
// from MinFetchVersion to MaxFetchVersion.
func parseFetchResponse(b []byte, version int16) (*FetchResponse, error) {
	switch {
	case version > MaxFetchVersion:
		return nil, fmt.Errorf("version %d is newer than %d, the highest Fetch version read here", version, MaxFetchVersion)
	case version < MinFetchVersion:
		return nil, fmt.Errorf("version %d is older than %d, the lowest Fetch version read here", version, MinFetchVersion)
	}
	d := wire{b: b}
	res := &FetchResponse{}
	d.int32() // throttle_time_ms
	if version >= 7 {
		res.ErrorCode = d.int16()
		d.int32() // session_id
	}
	topics := d.arrayLen()
	for range topics {
		topic := d.string()
		parts := d.arrayLen()
		for range parts {
			p := FetchPartition{Topic: topic, LogStartOffset: -1}
			p.Partition = d.int32()
			p.ErrorCode = d.int16()
			p.HighWatermark = d.int64()
			p.LastStableOffset = d.int64()
			if version >= 5 {
				p.LogStartOffset = d.int64()
			}
			// Kept as bytes, read by Aborts.Reset: no allocation for a
			// partition whose response holds none.
			p.aborted = d.bytes(d.arrayLen() * abortedSize)
			if version >= 11 {
				d.int32() // preferred_read_replica
			}
			n := d.int32()
			if n > 0 {
				p.Records = d.bytes(int(n))
			}
			if d.err != nil {
				return nil, d.err
			}
			res.Partitions = append(res.Partitions, p)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return res, nil
}

// errShort is a response or batch shorter than its lengths say.
var errShort = errors.New("truncated")

// wire reads the big-endian fields of the Kafka protocol from b; the
// first error sticks and later reads return zeros.
type wire struct {
	b   []byte
	err error
}

func (d *wire) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b) < n {
		d.err = errShort
		d.b = nil
		return false
	}
	return true
}

func (d *wire) int16() int16 {
	if !d.need(2) {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(d.b))
	d.b = d.b[2:]
	return v
}

func (d *wire) int32() int32 {
	if !d.need(4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(d.b))
	d.b = d.b[4:]
	return v
}

func (d *wire) int64() int64 {
	if !d.need(8) {
		return 0
	}
	v := int64(binary.BigEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *wire) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *wire) skip(n int) { d.bytes(n) }

func (d *wire) string() string {
	n := d.int16()
	if n < 0 {
		return ""
	}
	return string(d.bytes(int(n)))
}

// arrayLen reads an array's length: 0 for a null array.
func (d *wire) arrayLen() int {
	n := d.int32()
	if n < 0 {
		return 0
	}
	// Each element takes at least a byte: a length beyond what is left is
	// a broken response, not a reason to allocate.
	if int(n) > len(d.b) {
		d.err, d.b = errShort, nil
		return 0
	}
	return int(n)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
