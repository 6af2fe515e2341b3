package pipeline

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// payload pads the benchmark events to the size of a typical click.
const payload = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

// hotPathShapes are the event shapes the hot path is measured on: the
// contract, and mapped shapes a team might have.
var hotPathShapes = []struct {
	name   string
	fields event.Fields
	msg    ingest.Message
}{
	{"contract", event.DefaultFields(), ingest.Message{
		Value: []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","referrer":"https://example.com/","payload":"` + payload + `"}`)}},
	{"nested path, epoch ms", event.Fields{Tenant: "json:customer_id", EventID: "json:context.session.id", User: "json:context.user.id", Time: "json:ts", TimeFormat: "unix-ms"}, ingest.Message{
		Value: []byte(`{"customer_id":"acme","ts":1795251600123,"context":{"page":{"url":"/pricing","referrer":"https://example.com/"},"session":{"id":"e-123456"},"user":{"id":"u-42"}},"payload":"` + payload + `"}`)}},
	{"tenant header", event.Fields{Tenant: "header:tenant", EventID: "json:event_id", User: "json:user_id", Time: "json:occurred_at", TimeFormat: "rfc3339"}, ingest.Message{
		Headers: []ingest.Header{{Key: "trace", Value: []byte("00-abc")}, {Key: "tenant", Value: []byte("acme")}},
		Value:   []byte(`{"event_id":"e-123456","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","referrer":"https://example.com/","payload":"` + payload + `"}`)}},
}

// BenchmarkHotPath is the per-event work between a Kafka message and a row
// ready for a batch: find the mapped headers, decode and validate, look up
// the TTL, compute the cell timestamp and expiry, build the row key.
func BenchmarkHotPath(b *testing.B) {
	for _, s := range hotPathShapes {
		b.Run(s.name, func(b *testing.B) { hotPath(b, s.fields, s.msg) })
	}
}

func hotPath(b *testing.B, fields event.Fields, msg ingest.Message) {
	cfg, err := tenants.Load("../tenants.yaml")
	if err != nil {
		b.Fatal(err)
	}
	pc := DefaultConfig()
	pc.Fields = fields
	if err := pc.Resolve(); err != nil {
		b.Fatal(err)
	}
	dec := pc.Decoder
	msg.Time = time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)
	b.SetBytes(int64(len(msg.Value)))
	b.ReportAllocs()
	var row sink.Row
	for b.Loop() {
		rec := record(dec.Mapping, &msg)
		ev, err := dec.DecodeRecord(&rec)
		if err != nil {
			b.Fatal(err)
		}
		cell := cfg.Policy.Cell(ev.Tenant, ev.Base)
		row = sink.Row{Key: rowkey.Key(ev.Tenant, ev.User, ev.ID, ev.Base.UnixMilli()), Timestamp: cell.Timestamp, Value: msg.Value, WrittenAt: cfg.Policy.RecordRealTimestamp}
	}
	_ = row
}

// The same, allocation-checked for each shape: at most the row key.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, s := range hotPathShapes {
		r := testing.Benchmark(func(b *testing.B) { hotPath(b, s.fields, s.msg) })
		if a := r.AllocsPerOp(); a > 2 {
			t.Errorf("%s: hot path allocates %d times per event, want at most 2", s.name, a)
		}
	}
}

// benchSource serves n copies of one message, as responses of perPoll, with
// the real Tracker, and closes done once every one is settled.
type benchSource struct {
	tracker *ingest.Tracker
	epoch   *ingest.Assignment
	msg     ingest.Message
	perPoll int
	next, n int64
	settled atomic.Int64
	done    chan struct{}
}

func (s *benchSource) Poll(ctx context.Context, reuse []ingest.Fetched) ([]ingest.Fetched, error) {
	if s.next == s.n {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out := reuse[:0]
	for range min(int64(s.perPoll), s.n-s.next) {
		m := s.msg
		m.Offset = s.next
		s.next++
		out = append(out, ingest.Fetched{Msg: m, Ack: s.tracker.Track(s.epoch, m.Offset, 0)})
	}
	return out, nil
}

func (s *benchSource) settle(n int) {
	if s.settled.Add(int64(n)) == s.n {
		close(s.done)
	}
}
func (s *benchSource) Done(a ingest.Ack)        { s.tracker.Done(a); s.settle(1) }
func (s *benchSource) Settle(acks []ingest.Ack) { s.tracker.DoneAll(acks); s.settle(len(acks)) }
func (s *benchSource) Failed() <-chan struct{}  { return nil }

type discardWriter struct{}

func (discardWriter) Write(_ context.Context, rows []sink.Row) ([]error, error) {
	return make([]error, len(rows)), nil
}

// BenchmarkPipeline is the worker's own cost per event between a fetched
// response and a written batch, with the default settings: routing,
// batching, handing batches to the writers, settling, counting. Bigtable
// and Kafka are left out (a writer that discards, a source that serves
// one event), so what it measures is what cellttl adds to the two clients.
// Its ns/op is wall time per event with the writers running beside the
// fetch loop.
func BenchmarkPipeline(b *testing.B) {
	cfg, err := tenants.Load("../tenants.yaml")
	if err != nil {
		b.Fatal(err)
	}
	pc := DefaultConfig()
	if err := pc.Resolve(); err != nil {
		b.Fatal(err)
	}
	tr := ingest.NewTracker()
	src := &benchSource{tracker: tr, epoch: tr.Assign(map[int]int64{0: -1})[0], perPoll: 5000, n: int64(b.N), done: make(chan struct{}),
		msg: ingest.Message{Topic: "clicks", Value: hotPathShapes[0].msg.Value, Time: time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)}}
	p := New(pc, src, discardWriter{}, nil, func() *tenants.Config { return cfg }, nil, slog.New(slog.DiscardHandler))
	p.now = func() time.Time { return src.msg.Time }
	ctx, cancel := context.WithCancel(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-src.done
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
