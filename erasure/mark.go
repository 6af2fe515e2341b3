package erasure

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Position is where a record was read: its input topic, partition and
// offset. The zero Position (no topic) is a record whose place is not
// known, erased by its time alone.
type Position struct {
	Topic string
	// TopicID is the incarnation of Topic the record was read from, when
	// it is known apart from the reader's own (a letter says which it was
	// placed from); "" is the reader's (Watch.SetTopicID).
	TopicID   string
	Partition int
	Offset    int64
}

// incarnation is the incarnation of p's topic to hold a mark to: p's own
// when it says, else the reader's (ids, by topic).
func (p Position) incarnation(ids map[string]string) string {
	if p.TopicID != "" {
		return p.TopicID
	}
	return ids[p.Topic]
}

// Mark is the input topic's end offsets, read just after an erasure was
// recorded: every record below them was appended before the workers could
// know of the erasure, and is erased whatever time it carries. Time alone
// cannot say so: an event may carry a time up to its record's timestamp +
// --max-clock-skew, and a producer chooses the record's timestamp, so an
// event appended before the erasure may carry a time after erased_up_to.
//
// A topic deleted and created again under the same name, or the mirror a
// cluster fails over to, starts its offsets again. So a mark names the
// incarnation its offsets are of, by the topic's id (Kafka's topic UUID),
// and a mark of another incarnation than the one a worker reads covers
// every record of the topic while its record is in force: offsets say
// nothing there, and the erasure errs on its own side. A mark of a broker
// that gives no ids (before Kafka 2.8) has none, and covers by offsets.
type Mark struct {
	Topic string `json:"topic"`
	// TopicID is the incarnation of Topic the offsets are of: Kafka's id,
	// "" when the broker gave none.
	TopicID string `json:"topic_id,omitempty"`
	// Ends holds each partition's end offset, by partition id.
	Ends []int64 `json:"end_offsets"`
}

// anyIncarnation is the id of the union of marks of two incarnations: it
// covers every record of the topic (each covers all of the other's).
const anyIncarnation = "*"

// covers reports whether the record at p was appended before m was read,
// the topic's incarnation being current ("" when the reader knows none).
func (m *Mark) covers(p Position, current string) bool {
	switch {
	case m == nil || p.Topic != m.Topic:
		return false
	case m.TopicID == anyIncarnation || m.TopicID != "" && current != "" && m.TopicID != current:
		return true
	}
	return p.Partition >= 0 && p.Partition < len(m.Ends) && p.Offset < m.Ends[p.Partition]
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
	case a.TopicID != "" && b.TopicID != "" && a.TopicID != b.TopicID:
		return &Mark{Topic: a.Topic, TopicID: anyIncarnation}
	}
	out := &Mark{Topic: a.Topic, TopicID: cmp.Or(a.TopicID, b.TopicID), Ends: slices.Clone(a.Ends)}
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
	switch {
	case a == nil || a.Topic != b.Topic:
		return false
	case a.TopicID == anyIncarnation:
		return true
	case b.TopicID == anyIncarnation, b.TopicID != "" && a.TopicID != b.TopicID, len(a.Ends) < len(b.Ends):
		// An id a lacks, or another: b covers every record of the other
		// incarnations, a only what lies below its ends.
		return false
	}
	for i, e := range b.Ends {
		if a.Ends[i] < e {
			return false
		}
	}
	return true
}

// markVersion leads an encoded mark, so that the encoding can change: 1
// without the topic's id, 2 with it. A mark without an id is written as
// version 1, which a worker of an earlier release reads.
const (
	markVersion   = 1
	markVersionID = 2
	// maxTopicIDLen bounds a decoded id: Kafka's are 22 characters.
	maxTopicIDLen = 64
)

// encode is the mark as the ledger table holds it: a version byte, the
// topic's length and name, with version 2 the id's length and the id, the
// number of partitions, then each end offset, all as unsigned varints.
func (m *Mark) encode() []byte {
	b := []byte{markVersion}
	if m.TopicID != "" {
		b[0] = markVersionID
	}
	b = binary.AppendUvarint(b, uint64(len(m.Topic)))
	b = append(b, m.Topic...)
	if m.TopicID != "" {
		b = binary.AppendUvarint(b, uint64(len(m.TopicID)))
		b = append(b, m.TopicID...)
	}
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
	if len(b) == 0 || b[0] != markVersion && b[0] != markVersionID {
		return nil, errBadMark
	}
	withID := b[0] == markVersionID
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, errBadMark
	}
	m := &Mark{Topic: string(b[k : k+int(n)])}
	b = b[k+int(n):]
	if withID {
		n, k := binary.Uvarint(b)
		if k <= 0 || n == 0 || n > maxTopicIDLen || n > uint64(len(b)-k) || string(b[k:k+int(n)]) == anyIncarnation {
			return nil, errBadMark
		}
		m.TopicID, b = string(b[k:k+int(n)]), b[k+int(n):]
	}
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
	if m.TopicID != "" {
		return fmt.Sprintf("%s (topic id %s) end offsets %v (by partition)", m.Topic, m.TopicID, m.Ends)
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
