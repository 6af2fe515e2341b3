package sink

import (
	"context"
	"errors"
	"time"
)

// Row is one event's row.
type Row struct {
	Key string
	// Timestamp of every cell of the row, in microseconds, a multiple of 1000.
	Timestamp int64
	// Value goes into the event column exactly as given.
	Value []byte
	// WrittenAt asks for the written_at column with the real write time, at
	// the same timestamp so that it expires with the event.
	WrittenAt bool
	// TTL, when TTL.Own (the event gave its own), is written to the ttl
	// column, at the same timestamp so that it expires with the event.
	TTL TTL
	// Gen is the generation of WriterConfig.Gate the row was decided
	// under: an attempt under a later one asks the gate again.
	Gen uint64
	// Source is where the row's record was read, for the Gate: an erasure
	// covers the records appended before it, whatever time they carry.
	Source Source
}

// Source is a record's place in its topic. The zero Source (no topic) is
// a row whose record is not known.
type Source struct {
	Topic string
	// TopicID is the incarnation of Topic, when the record says its own
	// (a dead letter's); "" is the reader's.
	TopicID   string
	Partition int
	Offset    int64
}

// TTL is what the ttl column of an event that gave its own TTL holds: the
// TTL it lives (its request within its tenant's bounds) and the TTL it
// asked for, so that a retention job can clamp the request again under
// other bounds.
type TTL struct {
	Effective, Requested time.Duration
	// Own is set when the event gave a TTL: the column is written.
	Own bool
}

// Gate can withdraw a row decided earlier: the erasure ledger, which may
// learn of an erased user while that user's rows wait to be written, or
// after Bigtable refused one for good (it then becomes no dead letter).
type Gate interface {
	// Generation grows whenever Admits may refuse a row it admitted.
	Generation() uint64
	// Admits reports whether the row at key, of the record read at topic,
	// partition and offset, may be written. An error says the gate cannot
	// tell yet (a lookup failed): the row is neither written nor
	// withdrawn, and the write asks again after a backoff.
	Admits(ctx context.Context, key string, at Source) (bool, error)
}

// ErrWithdrawn is the result of a row the Gate withdrew: it was not
// written, and must not be, nor set aside as a dead letter.
var ErrWithdrawn = errors.New("withdrawn before it was written")

// Cells is the number of cells (mutations) the row writes.
func (r *Row) Cells() int {
	n := 1
	if r.WrittenAt {
		n++
	}
	if r.TTL.Own {
		n++
	}
	return n
}
