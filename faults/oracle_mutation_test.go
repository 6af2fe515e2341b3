package faults

import (
	"context"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/rowkey"
)

// The oracle must fail when the defect it looks for is there. A short run
// is judged clean; then each defect is planted in what it left behind, on
// an event of its own, and the oracle must count exactly it.
func TestOracleCatchesPlantedDefects(t *testing.T) {
	t.Parallel()
	const partitions = 3
	s := newSuite(t, partitions)
	w := s.start()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s.produce(ctx, 1000, 2000)
	s.settle(partitions, time.Minute)
	s.term(w)
	v := s.judge(s.observe(partitions))
	if !v.clean() {
		t.Fatalf("a clean run judged: %+v %v", v, v.problems)
	}
	tbl := s.dc.Open(s.table)
	cfg := s.configs[0]
	// victims: the first valid events, and the first clamped one.
	var victims []int
	clampedSeq := -1
	for seq, ev := range s.events {
		switch {
		case ev.kind == valid && len(victims) < 3:
			victims = append(victims, seq)
		case ev.kind == clamped && clampedSeq < 0:
			clampedSeq = seq
		}
	}
	apply := func(key string, m *bigtable.Mutation) {
		t.Helper()
		if err := tbl.Apply(context.Background(), key, m); err != nil {
			t.Fatal(err)
		}
	}
	set := func(key string, ts int64) *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set("c", "event", bigtable.Timestamp(ts), []byte("planted"))
		m.Set("c", "written_at", bigtable.Timestamp(ts), []byte("planted"))
		return m
	}
	keyOf := func(seq int, millis int64) string {
		ev := s.events[seq]
		return rowkey.Key(ev.tenant, ev.user, "f-"+strconv.Itoa(seq), millis)
	}
	plant := []struct {
		defect string
		do     func()
		count  func(verdict) int
	}{
		{"a duplicate row", func() {
			ev := s.events[victims[0]]
			apply(keyOf(victims[0], ev.millis+1), set("", cfg.Policy.Cell(ev.tenant, time.UnixMilli(ev.millis)).Timestamp))
		}, func(v verdict) int { return v.DuplicateRows }},
		{"an extra version", func() {
			ev := s.events[victims[1]]
			m := bigtable.NewMutation()
			m.Set("c", "event", bigtable.Timestamp(cfg.Policy.Cell(ev.tenant, time.UnixMilli(ev.millis)).Timestamp-1000), []byte("older"))
			apply(keyOf(victims[1], ev.millis), m)
		}, func(v verdict) int { return v.DuplicateVersions }},
		{"a lost event", func() {
			m := bigtable.NewMutation()
			m.DeleteRow()
			apply(keyOf(victims[2], s.events[victims[2]].millis), m)
		}, func(v verdict) int { return v.Lost }},
		{"a clamped event at the processing time", func() {
			o := s.observe(partitions)
			rt := o.where[clampedSeq].Time
			m := bigtable.NewMutation()
			m.DeleteRow()
			apply(keyOf(clampedSeq, rt.UnixMilli()), m)
			later := rt.Add(time.Second) // where the old clamp put it
			apply(keyOf(clampedSeq, rt.UnixMilli()), set("", cfg.Policy.Cell(s.events[clampedSeq].tenant, later).Timestamp))
		}, func(v verdict) int { return v.WrongTimestamps }},
		{"a commit moved back", func() {
			tr := &kafka.Transport{}
			defer tr.CloseIdleConnections()
			c := &kafka.Client{Addr: kafka.TCP(s.brokers...), Transport: tr, Timeout: 10 * time.Second}
			if _, err := c.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: s.group, GenerationID: -1,
				Topics: map[string][]kafka.OffsetCommit{s.topic: {{Partition: 0, Offset: 5}}}}); err != nil {
				t.Fatal(err)
			}
		}, func(v verdict) int { return v.Uncommitted }},
	}
	for _, p := range plant {
		before := p.count(v)
		p.do()
		v = s.judge(s.observe(partitions))
		if got := p.count(v) - before; got < 1 {
			t.Errorf("planted %s: the oracle did not see it (%+v)", p.defect, v)
		} else {
			t.Logf("planted %s: the oracle counted %d", p.defect, got)
		}
		if v.clean() {
			t.Errorf("planted %s: the oracle judges the run clean", p.defect)
		}
	}
}

// A dead letter without its payload (its topic keeps records longer than
// the event may live) keeps neither the record's headers nor its key: the
// oracle finds it by where the record was, and judges a clean run clean.
// (It once looked for the producer's seq header alone, and called every
// such letter lost: a worker whose first check of the topics met a broker
// restarting sends letters without payload until its next check.)
func TestOracleFindsLettersWithoutPayload(t *testing.T) {
	t.Parallel()
	const partitions = 3
	s := newSuite(t, partitions, withDeadLetterConfig(map[string]string{"retention.ms": strconv.Itoa(30 * 24 * 3600 * 1000)}))
	w := s.start()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	s.produce(ctx, 1000, 2000)
	s.settle(partitions, time.Minute)
	s.term(w)
	v := s.judge(s.observe(partitions))
	if v.Poison == 0 || v.Truncated != v.Poison {
		t.Errorf("%d poison events, %d letters without payload: want every letter without it", v.Poison, v.Truncated)
	}
	if !v.clean() {
		t.Errorf("a clean run with letters without payload judged: %+v %v", v, v.problems)
	}
}
