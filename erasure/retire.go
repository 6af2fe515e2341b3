package erasure

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
)

// Retirement: a record kept forever because the input topic might still
// hold, with any time, a record its mark covers (the topic's producers may
// stamp records any time ahead, so Kafka may keep them as long) needs that
// life only while the topic holds one. Kafka deletes from the front of
// each partition: once every partition's log start offset has reached the
// mark's end offset, no record the mark covers is left to replay, and the
// record needs only the life of its other copies (the dead-letter topics',
// the backups') and the time part (the tenant's longest TTL from
// erased_up_to). Retire gives it that life.

// LogStarts reads the log start offset of each partition of a topic, and
// the topic's id ("" when the broker gives none).
type LogStarts func(ctx context.Context, topic string) (starts []int64, id string, err error)

// Life is the expiry of a record of tenant, erased up to upTo and recorded
// at recorded, once no record its mark covers is left in the input topic;
// zero when it must still never expire (a dead-letter topic that keeps
// records forever).
type Life func(tenant string, upTo, recorded time.Time) time.Time

// Retired is what one Retire did.
type Retired struct {
	// Records are those given a life; Kept, those with a mark that must
	// stay in force, their records still in the topic (or the topic's
	// offsets unread: Unread names why).
	Records int      `json:"records"`
	Kept    int      `json:"kept"`
	Unread  []string `json:"unread,omitempty"`
}

// Retire gives a life to every record that never expires, has a mark, and
// whose mark covers nothing the input topic still holds: its record row's
// cells and its index cell carry the new expiry (the index cell moved to
// that hour's row; gone when the expiry has passed), and the
// never-expiring index cell is deleted, last, so that a worker's reread of
// the index finds the record in one bucket or the other. A record without
// a mark (erased by time alone), or whose topic's offsets cannot be read,
// stays as it is. Workers take the new life at their next reread.
func (s *Store) Retire(ctx context.Context, now time.Time, starts LogStarts, life Life) (Retired, error) {
	var done Retired
	cands, err := s.foreverMarked(ctx)
	if err != nil {
		return done, err
	}
	type topicState struct {
		starts []int64
		id     string
	}
	read := map[string]topicState{}
	for _, c := range cands {
		st, ok := read[c.mark.Topic]
		if !ok {
			if st.starts, st.id, err = starts(ctx, c.mark.Topic); err != nil {
				done.Unread = append(done.Unread, fmt.Sprintf("%s: %v", c.mark.Topic, err))
			}
			read[c.mark.Topic] = st
		}
		// A mark of another incarnation (or of one the broker no longer
		// names) stays: the log start offsets are another log's.
		other := c.mark.TopicID != "" && c.mark.TopicID != st.id
		exp := life(c.tenant, time.UnixMilli(c.upTo), time.UnixMilli(c.recorded))
		if st.starts == nil || other || !c.mark.passed(st.starts) || exp.IsZero() {
			done.Kept++
			continue
		}
		if err := s.retire(ctx, c, exp, now); err != nil {
			return done, err
		}
		done.Records++
	}
	return done, nil
}

// marked is a never-expiring index cell with a mark: one record.
type marked struct {
	row, column  string
	tenant, user string
	recorded     int64
	upTo         int64
	mark         *Mark
	value        []byte
}

// foreverMarked reads the index cells of the records that never expire and
// have a mark.
func (s *Store) foreverMarked(ctx context.Context) ([]marked, error) {
	prefix := fmt.Sprintf("%s%013d#", indexPrefix, rowkey.MaxMillis)
	ms := marks{}
	var out []marked
	err := s.tbl.ReadRows(ctx, bigtable.PrefixRange(prefix), func(row bigtable.Row) bool {
		for _, it := range row[Family] {
			col := strings.TrimPrefix(it.Column, Family+":")
			i := strings.LastIndexByte(col, rowkey.Sep)
			if i < 0 || it.Timestamp != never || len(it.Value) <= 8 {
				continue
			}
			tenant, user, ok := parseRecordKey(col[:i])
			recorded, err := strconv.ParseInt(col[i+1:], 10, 64)
			m, merr := ms.decode(it.Value[8:])
			if !ok || err != nil || merr != nil {
				continue // not forget's: it suppresses nothing it could retire
			}
			out = append(out, marked{row: row.Key(), column: col, tenant: tenant, user: user, recorded: recorded,
				upTo: int64(binary.BigEndian.Uint64(it.Value)), mark: m, value: it.Value})
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read the never-expiring records of the erasure ledger %s: %w", s.name, err)
	}
	return out, nil
}

// passed reports whether every partition's log start offset has reached
// the mark's end offset: nothing below the mark is left in the topic.
func (m *Mark) passed(starts []int64) bool {
	if len(starts) < len(m.Ends) {
		return false // partitions are never removed: not the same topic
	}
	for p, end := range m.Ends {
		if starts[p] < end {
			return false
		}
	}
	return true
}

// retire rewrites one record with its cells at exp, or at the record's
// own earliest expiry when later (Erasure.AtLeastUntil): the record row's
// cells of that forget (named by when it recorded), then its index cell
// in the hour of its new expiry (none when that has passed: the record
// has expired), then the never-expiring index cell goes.
func (s *Store) retire(ctx context.Context, c marked, exp, now time.Time) error {
	at := fmt.Sprintf(".%013d", c.recorded)
	row, err := s.tbl.ReadRow(ctx, recordKey(c.tenant, c.user), bigtable.RowFilter(bigtable.ChainFilters(
		bigtable.FamilyFilter("^"+Family+"$"), bigtable.ColumnFilter(`^[a-z_]+\`+at+`$`), bigtable.TimestampRangeFilterMicros(never, 0))))
	if err != nil {
		return fmt.Errorf("read the record to retire in %s: %w", s.name, err)
	}
	for _, it := range row[Family] {
		if own := fromMillis(it.Value); it.Column == Family+":"+colAtLeast+at && own.After(exp) {
			exp = own
		}
	}
	ts := bigtable.Time(exp.Truncate(time.Millisecond))
	m := bigtable.NewMutation()
	for _, it := range row[Family] {
		col := strings.TrimPrefix(it.Column, Family+":")
		m.DeleteTimestampRange(Family, col, never, 0)
		m.Set(Family, col, ts, it.Value)
	}
	if len(row[Family]) > 0 {
		if err := s.tbl.Apply(ctx, recordKey(c.tenant, c.user), m); err != nil {
			return fmt.Errorf("retire a record in %s: %w", s.name, err)
		}
	}
	if ts > bigtable.Time(now) {
		x := bigtable.NewMutation()
		x.Set(Family, c.column, ts, c.value)
		if err := s.tbl.Apply(ctx, indexKey(ts, c.tenant, c.user, c.recorded), x); err != nil {
			return fmt.Errorf("retire a record in %s: %w", s.name, err)
		}
	}
	d := bigtable.NewMutation()
	d.DeleteCellsInColumn(Family, c.column)
	if err := s.tbl.Apply(ctx, c.row, d); err != nil {
		return fmt.Errorf("retire a record in %s: %w", s.name, err)
	}
	return nil
}
