package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/segmentio/kafka-go"
)

// measured is one measurement: its rate, and the CPU time per event of
// the process measured.
type measured struct {
	rate        float64 // events per second
	steady      float64 // events per second after the first 2 s (0: done by then)
	cpuPerEvent float64 // µs
	rss         int64   // peak resident set, bytes (the worker only)
	cores       string  // who used the two cores meanwhile
}

// perEvent is CPU time per event, in microseconds.
func perEvent(cpu time.Duration, events int) float64 {
	return float64(cpu.Microseconds()) / float64(events)
}

// benchApplyBulk writes the rows the events become straight to a new table
// with the client's ApplyBulk, as the worker's writers do (the mutations
// built in the timed part): the client side's floor of CPU per row.
func benchApplyBulk(ctx context.Context, p *expiry.Policy, m synth.Mix, values [][]byte, recs []synth.Sent, writers int) (measured, error) {
	tbl, family, cleanup, err := benchTable(ctx, p)
	if err != nil {
		return measured{}, err
	}
	defer cleanup()
	rows := make([]sink.Row, len(values))
	for i, r := range recs {
		rows[i] = benchRow(p, m, i, r, values[i])
	}
	batches := make(chan []sink.Row)
	errs := make(chan error, writers)
	watch := watchCPU(0)
	cpu0, start := lab.SelfCPU(), time.Now()
	for range writers {
		go func() {
			for b := range batches {
				if err := applyBulk(ctx, tbl, family, b); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < len(rows); i += 1000 {
		batches <- rows[i:min(i+1000, len(rows))]
	}
	close(batches)
	for range writers {
		if err := <-errs; err != nil {
			return measured{}, err
		}
	}
	return measured{rate: float64(len(rows)) / time.Since(start).Seconds(), cpuPerEvent: perEvent(lab.SelfCPU()-cpu0, len(rows)), cores: watch.shares()}, nil
}

// benchRow is the row the worker makes of generated event seq: the raw
// writes write what the worker would.
func benchRow(p *expiry.Policy, m synth.Mix, seq int, r synth.Sent, value []byte) sink.Row {
	tenant := m.TenantName(int(r.Tenant))
	return sink.Row{Key: rowkey.Key(tenant, synth.UserName(r.User), strconv.Itoa(seq), r.Millis),
		Timestamp: p.Cell(tenant, time.UnixMilli(r.Millis)).Timestamp, Value: value, WrittenAt: p.RecordRealTimestamp}
}

// benchTable makes a table for raw writes, and returns it with its family
// and what deletes it (the emulator never frees memory otherwise).
func benchTable(ctx context.Context, p *expiry.Policy) (*bigtable.Table, string, func(), error) {
	dc, err := bigtable.NewClient(ctx, "local", "local")
	if err != nil {
		return nil, "", nil, err
	}
	ac, err := bigtable.NewAdminClient(ctx, "local", "local")
	if err != nil {
		dc.Close()
		return nil, "", nil, err
	}
	t := sink.Target{Table: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Family: "c"}
	cleanup := func() {
		_ = ac.DeleteTable(context.WithoutCancel(ctx), t.Table)
		ac.Close()
		dc.Close()
	}
	if _, err := sink.Setup(ctx, ac, dc, t, p.GCMaxAge(), sink.SetupOptions{}); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return dc.Open(t.Table), t.Family, cleanup, nil
}

// applyBulk writes rows in one ApplyBulk call, the cells as the worker
// writes them.
func applyBulk(ctx context.Context, tbl *bigtable.Table, family string, rows []sink.Row) error {
	keys := make([]string, len(rows))
	muts := make([]*bigtable.Mutation, len(rows))
	var now [8]byte
	binary.BigEndian.PutUint64(now[:], uint64(time.Now().UnixMicro()))
	for i := range rows {
		r := &rows[i]
		mut := bigtable.NewMutation()
		mut.Set(family, rowkey.ColumnEvent, bigtable.Timestamp(r.Timestamp), r.Value)
		if r.WrittenAt {
			mut.Set(family, rowkey.ColumnWrittenAt, bigtable.Timestamp(r.Timestamp), now[:])
		}
		keys[i], muts[i] = r.Key, mut
	}
	rowErrs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("ApplyBulk: %w", err)
	}
	for _, e := range rowErrs {
		if e != nil {
			return fmt.Errorf("ApplyBulk: a row: %w", e)
		}
	}
	return nil
}

func produceAll(ctx context.Context, brokers []string, topic string, msgs []kafka.Message) error {
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchSize: 5000,
		BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll, Transport: &kafka.Transport{}}
	defer w.Close()
	for i := 0; i < len(msgs); i += 20000 {
		// Copies: the writer sets each message's topic and partition.
		batch := slices.Clone(msgs[i:min(i+20000, len(msgs))])
		if err := w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// benchConsume reads n messages with a kafka-go consumer-group reader, timed
// from the first message to the last; its CPU time is counted from the
// reader's start (joining the group costs little of it).
func benchConsume(ctx context.Context, brokers []string, topic string, n int) (measured, error) {
	cpu0, watch := lab.SelfCPU(), watchCPU(0)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, GroupID: topic + "-raw", MinBytes: 1, MaxBytes: 10 << 20,
		MaxWait: 250 * time.Millisecond, StartOffset: kafka.FirstOffset, QueueCapacity: 1000})
	defer r.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var start time.Time
	for i := range n {
		if _, err := r.FetchMessage(cctx); err != nil {
			return measured{}, fmt.Errorf("consume message %d of %d: %w", i, n, err)
		}
		if i == 0 {
			start = time.Now()
		}
	}
	return measured{rate: float64(n-1) / time.Since(start).Seconds(), cpuPerEvent: perEvent(lab.SelfCPU()-cpu0, n), cores: watch.shares()}, nil
}
