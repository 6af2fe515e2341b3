package verify

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/loadtest/synth"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
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
	m, err := synth.ParseMix([]string{"acme", "*"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, defect := range []string{"missing row", "duplicate row", "wrong timestamp", "extra version", "valid event dead-lettered"} {
		t.Run(defect, func(t *testing.T) {
			tgt := sink.Target(testenv.Table(t, ac, dc, cfg.Policy.GCMaxAge()))
			o := Options{Brokers: brokers, Project: "local", Instance: "local", Table: tgt.Table, Family: tgt.Family, DLQTopic: testenv.Name("dlq")}
			testenv.CreateTopic(t, brokers, o.DLQTopic, 1)
			g := synth.New(synth.Config{Run: testenv.Name("run"), Mix: m, Shape: synth.Contract(), Users: 50, ZipfS: 1.2, PayloadBytes: 10, Malformed: 0.2, Seed: 7})
			const n = 40
			recs := make([]synth.Sent, n)
			values := make([][]byte, n)
			var rows []sink.Row
			var dead []kafka.Message
			at := time.Now().Add(-time.Minute)
			for seq := range n {
				var msg kafka.Message
				msg, recs[seq] = g.Next(seq, at.Add(time.Duration(seq)*time.Millisecond))
				values[seq] = msg.Value
				if recs[seq].Valid {
					rows = append(rows, rowOf(cfg, g, seq, recs[seq], values[seq], 0))
				} else {
					dead = append(dead, deadLetter(g.Run(), seq))
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
			testenv.ProduceMessages(t, brokers, o.DLQTopic, dead...)
			if c, err := Run(ctx, o, cfg, g, recs); err != nil || !c.OK() {
				t.Fatalf("the verifier fails a correct run: %v\n%s", err, c.Summary())
			}

			victim := -1
			for seq, r := range recs {
				if r.Valid {
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
			c := func() *Result {
				c, err := Run(ctx, o, cfg, g, recs)
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
				dup := rowOf(cfg, g, victim, synth.Sent{Millis: recs[victim].Millis + 1, User: recs[victim].User, Tenant: recs[victim].Tenant, Valid: true}, values[victim], 0)
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
				testenv.ProduceMessages(t, brokers, o.DLQTopic, deadLetter(g.Run(), victim))
				got = c().unexpectedDeadLetters
			}
			if !slices.Equal(got, []int{victim}) {
				t.Errorf("planted %s on event %d; the verifier reports %v", defect, victim, got)
			}
			if cc := c(); cc.OK() {
				t.Errorf("planted %s; the verifier passes the run:\n%s", defect, cc.Summary())
			}
		})
	}
}

// rowOf is the row the worker writes for an event, its timestamp moved by
// shift microseconds.
func rowOf(cfg *tenants.Config, g *synth.Generator, seq int, r synth.Sent, value []byte, shift int64) sink.Row {
	tenant := g.Mix().TenantName(int(r.Tenant))
	return sink.Row{
		Key:       rowkey.Key(tenant, synth.UserName(r.User), g.EventID(seq), r.Millis),
		Timestamp: cfg.Policy.Cell(tenant, time.UnixMilli(r.Millis)).Timestamp + shift,
		Value:     value,
		WrittenAt: true,
	}
}

func deadLetter(run string, seq int) kafka.Message {
	return kafka.Message{Value: []byte("x"), Headers: []kafka.Header{{Key: "loadtest-run", Value: []byte(run)}, {Key: "loadtest-seq", Value: []byte(strconv.Itoa(seq))}}}
}
