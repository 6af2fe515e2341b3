package pipeline

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// BenchmarkHotPath is the per-event work between a Kafka message and a row
// ready for a batch: decode and validate, look up the TTL, compute the cell
// timestamp and expiry, build the row key.
func BenchmarkHotPath(b *testing.B) {
	cfg, err := tenants.Load("../tenants.yaml")
	if err != nil {
		b.Fatal(err)
	}
	dec := DefaultConfig().Decoder
	value := []byte(`{"event_id":"e-123456","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123Z","page":"/pricing","referrer":"https://example.com/","payload":"` +
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + `"}`)
	now := time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	var row sink.Row
	for b.Loop() {
		ev, err := dec.Decode(value, now)
		if err != nil {
			b.Fatal(err)
		}
		cell := cfg.Policy.Cell(ev.Tenant, ev.Base)
		row = sink.Row{Key: rowkey.Key(ev.Tenant, ev.User, ev.ID, ev.Base.UnixMilli()), Timestamp: cell.Timestamp, Value: value, WrittenAt: cfg.Policy.RecordRealTimestamp}
	}
	_ = row
}

// The same, allocation-checked: at most the row key.
func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	r := testing.Benchmark(BenchmarkHotPath)
	if a := r.AllocsPerOp(); a > 2 {
		t.Errorf("hot path allocates %d times per event, want at most 2", a)
	}
}
