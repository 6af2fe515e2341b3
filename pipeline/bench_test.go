package pipeline

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/event"
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
	msg    kafka.Message
}{
	{"contract", event.DefaultFields(), kafka.Message{
		Value: []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","referrer":"https://example.com/","payload":"` + payload + `"}`)}},
	{"nested path, epoch ms", event.Fields{Tenant: "json:customer_id", EventID: "json:context.session.id", User: "json:context.user.id", Time: "json:ts", TimeFormat: "unix-ms"}, kafka.Message{
		Value: []byte(`{"customer_id":"acme","ts":1795251600123,"context":{"page":{"url":"/pricing","referrer":"https://example.com/"},"session":{"id":"e-123456"},"user":{"id":"u-42"}},"payload":"` + payload + `"}`)}},
	{"tenant header", event.Fields{Tenant: "header:tenant", EventID: "json:event_id", User: "json:user_id", Time: "json:occurred_at", TimeFormat: "rfc3339"}, kafka.Message{
		Headers: []kafka.Header{{Key: "trace", Value: []byte("00-abc")}, {Key: "tenant", Value: []byte("acme")}},
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

func hotPath(b *testing.B, fields event.Fields, msg kafka.Message) {
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
