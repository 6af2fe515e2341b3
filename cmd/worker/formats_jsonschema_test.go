package main

import (
	"testing"
	"time"
)

// JSON Schema values written by Apicurio's serializer, each validated
// against the schema registered through the registry's
// Confluent-compatible API, land with the contract's cells, the user from
// a nested object; the schema evolves mid-partition, the time an RFC 3339
// string with nanoseconds in version 1 and epoch milliseconds in version 2
// (--event-time-format auto). A value without the framing (the same JSON
// a producer without the serializer would write), of an unknown id or not
// JSON after the framing is dead-lettered with its class.
func TestJSONSchemaThroughTheRegistry(t *testing.T) {
	t.Parallel()
	f := startFormatTest(t, "json-schema", "--user-from", "json:user.id", "--event-time-format", "auto")
	at := time.Now().Add(-5 * time.Minute).Truncate(time.Second).Add(123456789 * time.Nanosecond)
	f.produce(t, 1, 4, "v1", at)
	f.produce(t, 2, 4, "v2", at)
	f.expectLanded(t, 4, at, "v1", "v2")

	// Apicurio's serializer frames as Confluent's does: the id, then the
	// JSON.
	produced := f.expectSchemaIDs(t, 4)
	good := produced[0].Value
	if len(good) < 6 || good[5] != '{' {
		t.Fatalf("produced value % x, want a JSON object right after the schema id", good)
	}
	f.expectDeadLettered(t,
		badValue{append([]byte{}, good[5:]...), "not_framed", "its first byte is 0x7b"},
		badValue{unknownID(good[5:]), "unknown_schema", ""},
		badValue{append(append([]byte{}, good[:5]...), `{"event_id":`...), "not_json", ""},
	)
	if err := f.stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
