package kwire

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

// abortedSize is one aborted transaction of a Fetch response: its
// producer id and first offset.
const abortedSize = 16

// AbortedTransaction is a transaction a Fetch response says was aborted:
// its producer and the offset of its first record in the partition.
type AbortedTransaction struct {
	ProducerID  int64
	FirstOffset int64
}

// Aborts tells which record batches of a partition's fetched bytes belong
// to aborted transactions, as Kafka's own consumers do under
// read_committed (KIP-98): the response lists, for the offsets it covers,
// each aborted transaction by producer and first offset; reading the
// batches in offset order, a producer's transaction is aborted from its
// first offset until that producer's ABORT marker, and its transactional
// batches in between are not to be delivered.
//
// Its state is of one response and one partition, never carried over: the
// broker lists every aborted transaction that overlaps the offsets it
// returns, also one begun before them, so a response that begins
// mid-transaction, or one cut short before a marker, is judged by its own
// list alone. An Aborts is reused from response to response (Reset), and
// allocates nothing once its slices have grown to the transactions of a
// response.
type Aborts struct {
	// pending are the response's aborted transactions by first offset,
	// those from next on not yet reached.
	pending []AbortedTransaction
	next    int
	// open are the producers whose aborted transaction is being read.
	open []int64
}

// Reset starts on the batches of p, which may be nil: a partition read
// under read_uncommitted, whose aborted transactions are all delivered.
func (a *Aborts) Reset(p *FetchPartition) {
	a.pending, a.next, a.open = a.pending[:0], 0, a.open[:0]
	if p == nil {
		return
	}
	for b := p.aborted; len(b) >= abortedSize; b = b[abortedSize:] {
		a.pending = append(a.pending, AbortedTransaction{
			ProducerID:  int64(binary.BigEndian.Uint64(b)),
			FirstOffset: int64(binary.BigEndian.Uint64(b[8:])),
		})
	}
	// The protocol does not say the list is in offset order: Kafka's
	// consumer puts it in a priority queue, this sorts it once.
	slices.SortFunc(a.pending, func(x, y AbortedTransaction) int { return cmp.Compare(x.FirstOffset, y.FirstOffset) })
}

// Aborted reports whether b, the next batch of the partition in offset
// order, holds records of an aborted transaction. Every batch of the
// response goes through it, also those before the offset asked for and
// control batches: an ABORT marker ends its producer's aborted
// transaction, and later batches of that producer are delivered again.
// The error is a marker whose type cannot be read, of a producer whose
// transaction it would end: a batch the broker sent corrupt.
func (a *Aborts) Aborted(b *Batch) (bool, error) {
	if b.producer < 0 || len(a.open) == 0 && a.next == len(a.pending) {
		return false, nil
	}
	for a.next < len(a.pending) && a.pending[a.next].FirstOffset <= b.Last {
		if id := a.pending[a.next].ProducerID; !slices.Contains(a.open, id) {
			a.open = append(a.open, id)
		}
		a.next++
	}
	i := slices.Index(a.open, b.producer)
	if i < 0 {
		return false, nil
	}
	if !b.Control() {
		return b.Transactional(), nil
	}
	abort, err := b.abortMarker()
	if err != nil {
		return false, err
	}
	if abort {
		a.open = slices.Delete(a.open, i, i+1)
	}
	return false, nil
}

// markerAbort is the type of an ABORT marker, the second int16 of a
// control record's key (COMMIT is 1).
const markerAbort = 0

// abortMarker reports whether a control batch is a transaction's ABORT
// marker, by its first record's key: version (int16), type (int16). A
// broker writes markers uncompressed, one record a batch.
func (b *Batch) abortMarker() (bool, error) {
	if b.codec() != codecNone || b.count < 1 {
		return false, fmt.Errorf("%w: control batch at offset %d (%s, %d records) holds no readable marker", errCorrupt, b.First, b.Codec(), b.count)
	}
	d := varints{b: b.records}
	d.varint() // the record's length
	d.skip(1)  // attributes
	d.varint() // timestamp delta
	d.varint() // offset delta
	key := d.bytes()
	if d.err != nil || len(key) < 4 || int16(binary.BigEndian.Uint16(key)) < 0 {
		return false, fmt.Errorf("%w: control record at offset %d: key %x", errCorrupt, b.First, key)
	}
	return binary.BigEndian.Uint16(key[2:]) == markerAbort, nil
}
