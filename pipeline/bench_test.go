package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/ingest"
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
	{"own TTL, JSON field", withTTL("json:ttl"), ingest.Message{
		Value: []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","ttl":"30m","page":"/pricing","referrer":"https://example.com/","payload":"` + payload + `"}`)}},
	{"own TTL, header", withTTL("header:x-ttl"), ingest.Message{
		Headers: []ingest.Header{{Key: "trace", Value: []byte("00-abc")}, {Key: "x-ttl", Value: []byte("1800")}},
		Value:   []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","referrer":"https://example.com/","payload":"` + payload + `"}`)}},
}

// withTTL is the contract with --ttl-from from.
func withTTL(from string) event.Fields {
	f := event.DefaultFields()
	f.TTL = from
	return f
}

// BenchmarkHotPath is the per-event work between a Kafka message and a row
// ready for a batch (Decide): find the mapped headers, decode and
// validate, ask the erasure ledger (empty here), look up the TTL, compute
// the cell timestamp and expiry, build the row key.
func BenchmarkHotPath(b *testing.B) {
	for _, s := range hotPathShapes {
		b.Run(s.name, func(b *testing.B) { hotPath(b, s.fields, s.msg, nil) })
	}
}

// BenchmarkHotPathErasures is the contract's hot path under erasure
// ledgers: none, empty, and 100,000 erased users, of the event's tenant
// (its user not among them: the lookup a written event pays) and with the
// event's user among them (the event is skipped).
func BenchmarkHotPathErasures(b *testing.B) {
	s := hotPathShapes[0]
	for _, c := range []struct {
		name   string
		ledger *erasure.Ledger
	}{
		{"no ledger", nil},
		{"empty ledger", erasure.NewLedger(nil, time.Now())},
		{"100000 erased users", bigLedger(100_000, false)},
		{"100000 erased users, the event's among them", bigLedger(100_000, true)},
	} {
		b.Run(c.name, func(b *testing.B) { hotPath(b, s.fields, s.msg, c.ledger) })
	}
}

// bigLedger erases n users of acme, the benchmark event's tenant, and
// with its own user among them, u-42 too.
func bigLedger(n int, withEventUser bool) *erasure.Ledger {
	recs := make([]erasure.Erasure, 0, n+1)
	upTo := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC) // after the event
	for i := range n {
		recs = append(recs, erasure.Erasure{Tenant: "acme", User: fmt.Sprintf("user-%07d", i), UpTo: upTo})
	}
	if withEventUser {
		recs[0].User = "u-42"
	}
	return erasure.NewLedger(recs, upTo)
}

func hotPath(b *testing.B, fields event.Fields, msg ingest.Message, ledger *erasure.Ledger) {
	cfg, err := tenants.Load("../tenants.yaml")
	if err != nil {
		b.Fatal(err)
	}
	pc := DefaultConfig()
	pc.Fields = fields
	if err := pc.Resolve(); err != nil {
		b.Fatal(err)
	}
	msg.Time = time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)
	want := Write
	if ledger.Erased("acme", "u-42", msg.Time.UnixMilli(), erasure.Position{}) {
		want = Erased
	}
	b.SetBytes(int64(len(msg.Value)))
	b.ReportAllocs()
	var dec Decision
	for b.Loop() {
		dec = Decide(&pc.Decoder, cfg, ledger, &msg, msg.Time, time.Time{})
	}
	if dec.Fate != want {
		b.Fatalf("fate %d, want %d (%v)", dec.Fate, want, dec.Err)
	}
	if fields.TTL != "" && want == Write && (dec.TTL != 30*time.Minute || !dec.Row.TTL.Own) {
		b.Fatalf("the event's own TTL: %v (%+v), want 30m in the row", dec.TTL, dec.Row.TTL)
	}
}

// The same, allocation-checked for each shape and for a ledger of 100,000
// erased users: at most the row key.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	for _, s := range hotPathShapes {
		r := testing.Benchmark(func(b *testing.B) { hotPath(b, s.fields, s.msg, nil) })
		if a := r.AllocsPerOp(); a > 2 {
			t.Errorf("%s: hot path allocates %d times per event, want at most 2", s.name, a)
		}
	}
	ledger := bigLedger(100_000, false)
	r := testing.Benchmark(func(b *testing.B) { hotPath(b, hotPathShapes[0].fields, hotPathShapes[0].msg, ledger) })
	if a := r.AllocsPerOp(); a > 2 {
		t.Errorf("with 100,000 erased users: hot path allocates %d times per event, want at most 2", a)
	}
}

// benchSource serves n copies of one message, as responses of perPoll,
// keeps the settlements a consumer keeps, and closes done once every one
// is settled.
type benchSource struct {
	settled settlements
	msg     ingest.Message
	perPoll int
	next, n int64
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
		out = append(out, ingest.Fetched{Msg: m, Ack: ingest.Ack{Offset: m.Offset}})
	}
	s.settled.handOut(len(out))
	return out, nil
}

func (s *benchSource) settle(acks ...ingest.Ack) {
	// Only the call that settles the last offset sees them all settled.
	if len(acks) > 0 && s.settled.settle(acks...) == s.n {
		close(s.done)
	}
}
func (s *benchSource) Done(a ingest.Ack)        { s.settle(a) }
func (s *benchSource) Settle(acks []ingest.Ack) { s.settle(acks...) }
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
	src := &benchSource{perPoll: 5000, n: int64(b.N), done: make(chan struct{}),
		msg: ingest.Message{Topic: "clicks", Value: hotPathShapes[0].msg.Value, Time: time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)}}
	p := New(pc, src, discardWriter{}, nil, func() *tenants.Config { return cfg }, nil, nil, slog.New(slog.DiscardHandler))
	// The clock starts at the message's time and runs: batches come due
	// by age, the events never by their TTL.
	start := time.Now()
	p.now = func() time.Time { return src.msg.Time.Add(time.Since(start)) }
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
