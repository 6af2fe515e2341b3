package erasure

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Position is where a record was read: its input topic, partition and
// offset. The zero Position (no topic) is a record whose place is not
// known, erased by its time alone.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
}

// Mark is the input topic's end offsets, read just after an erasure was
// recorded: every record below them was appended before the workers could
// know of the erasure, and is erased whatever time it carries. Time alone
// cannot say so: an event may carry a time up to its record's timestamp +
// --max-clock-skew, and a producer chooses the record's timestamp, so an
// event appended before the erasure may carry a time after erased_up_to.
//
// A topic deleted and created again under the same name starts its offsets
// at 0 again: a mark of the old one then erases the user's first records
// of the new one too, up to the old ends. That errs on the side of the
// erasure, and is written in docs/retention.md.
type Mark struct {
	Topic string `json:"topic"`
	// Ends holds each partition's end offset, by partition id.
	Ends []int64 `json:"end_offsets"`
}

// covers reports whether the record at p was appended before m was read.
func (m *Mark) covers(p Position) bool {
	return m != nil && p.Topic == m.Topic && p.Partition >= 0 && p.Partition < len(m.Ends) && p.Offset < m.Ends[p.Partition]
}

// union is the mark covering what a and b each cover (either may be nil):
// a user erased twice keeps the later end offsets, and, should a topic
// have been created again in between, the larger of each partition's.
func union(a, b *Mark) *Mark {
	switch {
	case a == nil:
		return b
	case b == nil || a == b:
		return a
	case a.Topic != b.Topic:
		// Another input topic: keep the later record's (b's), as a worker
		// reads one topic. A ledger shared by the workers of two topics
		// should have a table each (--erasure-table).
		return b
	}
	out := &Mark{Topic: a.Topic, Ends: slices.Clone(a.Ends)}
	for i, e := range b.Ends {
		if i < len(out.Ends) {
			out.Ends[i] = max(out.Ends[i], e)
		} else {
			out.Ends = append(out.Ends, e)
		}
	}
	return out
}

// contains reports whether a covers every record b covers.
func (a *Mark) contains(b *Mark) bool {
	if b == nil || a == b {
		return true
	}
	if a == nil || a.Topic != b.Topic || len(a.Ends) < len(b.Ends) {
		return false
	}
	for i, e := range b.Ends {
		if a.Ends[i] < e {
			return false
		}
	}
	return true
}

// markVersion leads an encoded mark, so that the encoding can change.
const markVersion = 1

// encode is the mark as the ledger table holds it: a version byte, the
// topic's length and name, the number of partitions, then each end offset,
// all as unsigned varints.
func (m *Mark) encode() []byte {
	b := []byte{markVersion}
	b = binary.AppendUvarint(b, uint64(len(m.Topic)))
	b = append(b, m.Topic...)
	b = binary.AppendUvarint(b, uint64(len(m.Ends)))
	for _, e := range m.Ends {
		b = binary.AppendUvarint(b, uint64(max(0, e)))
	}
	return b
}

// maxMarkPartitions bounds a decoded mark: Kafka allows no more partitions
// than this per topic in practice, and a corrupt cell must not make a
// worker allocate gigabytes.
const maxMarkPartitions = 1 << 20

var errBadMark = errors.New("not an encoded mark")

// decodeMark reads an encoded mark.
func decodeMark(b []byte) (*Mark, error) {
	if len(b) == 0 || b[0] != markVersion {
		return nil, errBadMark
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, errBadMark
	}
	m := &Mark{Topic: string(b[k : k+int(n)])}
	b = b[k+int(n):]
	parts, k := binary.Uvarint(b)
	if k <= 0 || parts > maxMarkPartitions || parts > uint64(len(b)-k) {
		return nil, errBadMark
	}
	b = b[k:]
	m.Ends = make([]int64, parts)
	for i := range m.Ends {
		e, k := binary.Uvarint(b)
		if k <= 0 || e > 1<<62 {
			return nil, errBadMark
		}
		m.Ends[i], b = int64(e), b[k:]
	}
	if len(b) != 0 {
		return nil, errBadMark
	}
	return m, nil
}

// String is the mark as a receipt shows it.
func (m *Mark) String() string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("%s end offsets %v (by partition)", m.Topic, m.Ends)
}

// marks interns decoded marks within one load: the users erased by one
// forget share its mark, so a ledger holds each mark once.
type marks map[string]*Mark

func (ms marks) decode(b []byte) (*Mark, error) {
	if m, ok := ms[string(b)]; ok {
		return m, nil
	}
	m, err := decodeMark(b)
	if err != nil {
		return nil, err
	}
	ms[string(b)] = m
	return m, nil
}
