package kwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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

// Batch is one record batch of a partition's fetched bytes, or one legacy
// message (which may wrap a compressed set of messages).
type Batch struct {
	magic int8
	// First and Last are the offsets it holds. A legacy wrapper message's
	// own offset is that of the last message inside it: First is known
	// once the batch is opened (Reader.Open).
	First, Last int64
	attrs       int16
	// raw is the batch as it came from the broker.
	raw []byte
	// v2: the base timestamp and the records, compressed or not.
	baseTime int64
	// appendTime is the time the broker stamped the batch with, under
	// message.timestamp.type=LogAppendTime (logAppendTime). The broker
	// sets it as the batch's max timestamp and leaves each record's own
	// as produced: a record's time is then the batch's, as Kafka's own
	// consumer reads it.
	appendTime int64
	// producer is the id of the producer that wrote it, -1 when none did
	// (a legacy message, a producer neither idempotent nor transactional).
	producer int64
	records  []byte
	count    int32
	// Legacy: the message's timestamp, key and value.
	time       int64
	key, value []byte
}

func (b *Batch) codec() int8 { return int8(b.attrs & 0x07) }

// logAppendTime reports the timestamp type bit: the broker stamped it.
func (b *Batch) logAppendTime() bool { return b.magic > 0 && b.attrs&0x08 != 0 }

// recordTime is the time of a v2 record whose own delta is ts.
func (b *Batch) recordTime(ts int64) int64 {
	if b.logAppendTime() {
		return b.appendTime
	}
	return b.baseTime + ts
}

// Control reports a batch of transaction markers: nothing to deliver.
func (b *Batch) Control() bool { return b.magic == 2 && b.attrs&0x20 != 0 }

// Transactional reports a batch a producer wrote inside a transaction:
// its records count only once the transaction's commit marker follows.
func (b *Batch) Transactional() bool { return b.magic == 2 && b.attrs&0x10 != 0 }

// Legacy reports a message of magic 0 or 1: a wrapper's offsets before its
// last are unknown until it is opened.
func (b *Batch) Legacy() bool { return b.magic < 2 }

// Codec names the batch's compression: none, gzip, snappy, lz4 or zstd.
func (b *Batch) Codec() string { return codecName(b.codec()) }

// Payload is the batch's records as stored, compressed or not: a v2
// batch's records, a legacy message's value.
func (b *Batch) Payload() []byte {
	if b.magic < 2 {
		return b.value
	}
	return b.records
}

// Size is the batch's length on the wire.
func (b *Batch) Size() int { return len(b.raw) }

// errCorrupt is a batch whose checksum or framing is wrong: a broker or
// disk fault, not something a producer can send (the broker checks every
// batch it takes). The worker fetches it again, with backoff, and says so.
var errCorrupt = errors.New("corrupt record batch")

// NextBatch splits the first batch off b, a partition's records as a
// Fetch response holds them. ok is false when b does not hold a whole one:
// the response's size limit cut it, and it is to be fetched again. An
// error is a batch the broker sent corrupt.
func NextBatch(b []byte) (batch Batch, rest []byte, ok bool, err error) {
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

func (b *Batch) parseV2() error {
	raw := b.raw
	b.First = int64(binary.BigEndian.Uint64(raw))
	if len(raw) < batchHeader {
		return fmt.Errorf("%w: batch of %d bytes at offset %d", errCorrupt, len(raw), b.First)
	}
	if crc := binary.BigEndian.Uint32(raw[17:]); crc32.Checksum(raw[21:], castagnoli) != crc {
		return fmt.Errorf("%w: checksum mismatch at offset %d", errCorrupt, b.First)
	}
	b.attrs = int16(binary.BigEndian.Uint16(raw[21:]))
	b.Last = b.First + int64(int32(binary.BigEndian.Uint32(raw[23:])))
	b.baseTime = int64(binary.BigEndian.Uint64(raw[27:]))
	b.appendTime = int64(binary.BigEndian.Uint64(raw[35:]))
	b.producer = int64(binary.BigEndian.Uint64(raw[43:]))
	b.count = int32(binary.BigEndian.Uint32(raw[57:]))
	b.records = raw[batchHeader:]
	return nil
}

func (b *Batch) parseLegacy() error {
	raw := b.raw
	b.First = int64(binary.BigEndian.Uint64(raw))
	b.Last = b.First
	b.producer = -1
	d := wire{b: raw[12:]}
	crc := uint32(d.int32())
	if d.err == nil && crc32.ChecksumIEEE(d.b) != crc {
		return fmt.Errorf("%w: checksum mismatch at offset %d", errCorrupt, b.First)
	}
	d.skip(1) // magic
	if attrs := d.bytes(1); attrs != nil {
		b.attrs = int16(attrs[0])
	}
	b.time = -1
	if b.magic == 1 {
		b.time = d.int64()
		b.appendTime = b.time
	}
	b.key = d.nullableBytes()
	b.value = d.nullableBytes()
	if d.err != nil {
		return fmt.Errorf("%w: message at offset %d: %w", errCorrupt, b.First, d.err)
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
