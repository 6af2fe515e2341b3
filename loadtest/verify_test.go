package main

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// The verifier is an oracle: it must fail when the defect it looks for is
// there. Each test writes a run exactly as the worker would, checks that
// the verifier passes it, plants one defect, and checks that the verifier
// names that event and nothing else.
func TestVerifierReportsEachDefect(t *testing.T) {
	ctx := context.Background()
	brokers := testenv.Kafka(t)
	dc, ac := testenv.Clients(t)
	cfg, err := tenants.Parse([]byte("strategy: default-expiration\ndefault_ttl: 2d\nrecord_real_timestamp: true\ntenants:\n  acme: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseMix([]string{"acme", "*"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, defect := range []string{"missing row", "duplicate row", "wrong timestamp", "extra version", "valid event dead-lettered"} {
		t.Run(defect, func(t *testing.T) {
			tgt := sink.Target(testenv.Table(t, ac, dc, cfg.Policy.GCMaxAge()))
			o := &options{project: "local", instance: "local", table: tgt.Table, family: tgt.Family, dlqTopic: testenv.Name("dlq")}
			testenv.CreateTopic(t, brokers, o.dlqTopic, 1)
			g := newGenerator(testenv.Name("run"), m, shapes["contract"], 50, 1.2, 10, 0.2, 7)
			const n = 40
			recs := make([]record, n)
			values := make([][]byte, n)
			var rows []sink.Row
			var dead []kafka.Message
			at := time.Now().Add(-time.Minute)
			for seq := range n {
				var msg kafka.Message
				msg, recs[seq] = g.next(seq, at.Add(time.Duration(seq)*time.Millisecond))
				values[seq] = msg.Value
				if recs[seq].valid {
					rows = append(rows, rowOf(cfg, g, seq, recs[seq], values[seq], 0))
				} else {
					dead = append(dead, deadLetter(g.run, seq))
				}
			}
			w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, quietLog)
			if err != nil {
				t.Fatal(err)
			}
			write := func(rows ...sink.Row) {
				t.Helper()
				if res, err := w.Write(ctx, rows); err != nil || slices.ContainsFunc(res, func(e error) bool { return e != nil }) {
					t.Fatalf("write: %v %v", res, err)
				}
			}
			write(rows...)
			produceDead(t, brokers, o.dlqTopic, dead...)
			if c, err := verify(ctx, o, brokers, cfg, g, recs); err != nil || !c.ok() {
				t.Fatalf("the verifier fails a correct run: %v\n%s", err, c.summary())
			}

			victim := -1
			for seq, r := range recs {
				if r.valid {
					victim = seq
					break
				}
			}
			good := rowOf(cfg, g, victim, recs[victim], values[victim], 0)
			tbl := dc.Open(tgt.Table)
			deleteRow := func(key string) {
				mut := bigtable.NewMutation()
				mut.DeleteRow()
				if err := tbl.Apply(ctx, key, mut); err != nil {
					t.Fatal(err)
				}
			}
			var got []int
			c := func() *check {
				c, err := verify(ctx, o, brokers, cfg, g, recs)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			switch defect {
			case "missing row":
				deleteRow(good.Key)
				got = c().missing
			case "duplicate row":
				// The same event again under another time: a second row.
				dup := rowOf(cfg, g, victim, record{millis: recs[victim].millis + 1, user: recs[victim].user, tenant: recs[victim].tenant, valid: true}, values[victim], 0)
				write(dup)
				got = c().duplicateRows
			case "wrong timestamp":
				deleteRow(good.Key)
				write(rowOf(cfg, g, victim, recs[victim], values[victim], 1000))
				got = c().wrongTimestamp
			case "extra version":
				write(rowOf(cfg, g, victim, recs[victim], values[victim], -1000)) // an older version beside the right one
				got = c().duplicateVersions
			case "valid event dead-lettered":
				produceDead(t, brokers, o.dlqTopic, deadLetter(g.run, victim))
				got = c().unexpectedDeadLetters
			}
			if !slices.Equal(got, []int{victim}) {
				t.Errorf("planted %s on event %d; the verifier reports %v", defect, victim, got)
			}
			if cc := c(); cc.ok() {
				t.Errorf("planted %s; the verifier passes the run:\n%s", defect, cc.summary())
			}
		})
	}
}

// rowOf is the row the worker writes for an event, its timestamp moved by
// shift microseconds.
func rowOf(cfg *tenants.Config, g *generator, seq int, r record, value []byte, shift int64) sink.Row {
	tenant := g.mix.tenantName(int(r.tenant))
	return sink.Row{
		Key:       rowkey.Key(tenant, userName(r.user), g.eventID(seq), r.millis),
		Timestamp: cfg.Policy.Cell(tenant, time.UnixMilli(r.millis)).Timestamp + shift,
		Value:     value,
		WrittenAt: true,
	}
}

func deadLetter(run string, seq int) kafka.Message {
	return kafka.Message{Value: []byte("x"), Headers: []kafka.Header{{Key: "loadtest-run", Value: []byte(run)}, {Key: "loadtest-seq", Value: []byte(strconv.Itoa(seq))}}}
}

func produceDead(t *testing.T, brokers []string, topic string, msgs ...kafka.Message) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Transport: tr}
	defer w.Close()
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}
