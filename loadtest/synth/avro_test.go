package synth

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
)

// The load test's own Avro encoder writes what a real Avro library reads
// back with the schema it registers: the framing, every field, the time as
// timestamp-millis.
func TestAvroClickDecodes(t *testing.T) {
	sch, err := avro.Parse(AvroSchema)
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_764_000_000_123).UTC()
	v := avroClick(0x01020304, "e-1", "acme", "u-ü", at.UnixMilli(), strings.Repeat("x", 72))
	if v[0] != 0 || binary.BigEndian.Uint32(v[1:5]) != 0x01020304 {
		t.Fatalf("framing % x, want magic 0 and id 01 02 03 04", v[:5])
	}
	var got struct {
		EventID    string    `avro:"event_id"`
		TenantID   string    `avro:"tenant_id"`
		UserID     string    `avro:"user_id"`
		OccurredAt time.Time `avro:"occurred_at"`
		Payload    string    `avro:"payload"`
	}
	if err := avro.Unmarshal(sch, v[5:], &got); err != nil {
		t.Fatalf("hamba/avro cannot read the load test's Avro: %v", err)
	}
	if got.EventID != "e-1" || got.TenantID != "acme" || got.UserID != "u-ü" || !got.OccurredAt.Equal(at) || len(got.Payload) != 72 {
		t.Errorf("decoded %+v", got)
	}
}

// Only the shapes of the contract's fields have an Avro form; the rest are
// refused by name rather than written wrong.
func TestAvroShapes(t *testing.T) {
	for name, ok := range map[string]bool{"contract": true, "own-ttl": true, "nested": false, "header": false} {
		_, err := Avro(shapes[name], 7)
		if (err == nil) != ok {
			t.Errorf("Avro(%s): %v", name, err)
		}
	}
}
