package schema

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/event"
)

// One click per format, the examples docs/contract.md ("Avro, Protobuf
// and JSON Schema") links to, byte for byte: each value, framed as the
// contract describes, decodes with its schema into the event whose row
// the contract's Output works out. A change of the wire format the
// contract describes fails here before a reader finds it.
func TestContractExamples(t *testing.T) {
	at := time.Date(2026, 4, 30, 9, 0, 0, 123_000_000, time.UTC)
	for _, c := range []struct {
		format Format
		id     uint32
		schema string
		value  string // as the docs print it: hex bytes, or text after the framing
	}{
		{Avro, 7, `{"type":"record","name":"Click","namespace":"shop","fields":[
  {"name":"event_id","type":"string"},
  {"name":"tenant_id","type":"string"},
  {"name":"user_id","type":["null","string"],"default":null},
  {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}}]}`,
			"00 00 00 00 07 06 65 2d 31 08 61 63 6d 65 02 08 75 2d 34 32 f6 bb ee d9 bb 67"},
		{Protobuf, 8, `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Click {
  string event_id = 1;
  string tenant_id = 2;
  string user_id = 3;
  google.protobuf.Timestamp occurred_at = 4;
}`,
			"00 00 00 00 08 00 0a 03 65 2d 31 12 04 61 63 6d 65 1a 04 75 2d 34 32 22 0b 08 90 b4 cc cf 06 10 c0 a9 d3 3a"},
		{JSONSchema, 9, `{"type":"object","properties":{"event_id":{"type":"string"},"tenant_id":{"type":"string"},
  "user_id":{"type":"string"},"occurred_at":{"type":"string","format":"date-time"}},"required":["event_id","tenant_id"]}`,
			"00 00 00 00 09" + hex.EncodeToString([]byte(`{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T09:00:00.123Z"}`))},
	} {
		t.Run(c.format.String(), func(t *testing.T) {
			v, err := hex.DecodeString(strings.ReplaceAll(c.value, " ", ""))
			if err != nil {
				t.Fatal(err)
			}
			cm, m := compile(t, c.format, c.schema, event.DefaultFields())
			d := decoder(c.id, cm, m)
			ev, err := d.DecodeRecord(&event.Source{Value: v, Time: at.Add(time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "e-1" || ev.Tenant != "acme" || ev.User != "u-42" || !ev.Base.Equal(at) {
				t.Errorf("decoded %+v, want e-1 of acme, u-42, at %s", ev, at)
			}
		})
	}
}
