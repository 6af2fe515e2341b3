package main

import (
	"testing"
	"time"
)

// Avro events written by Apicurio's own serializer land with the
// contract's cells, the user read from a nested record; the schema
// evolves mid-partition; the registry going away holds the worker
// (nothing dead-lettered, /readyz 503) until it is back; values without
// the framing, of an unknown id or not decoding with their schema are
// dead-lettered with their classes.
func TestAvroThroughTheRegistry(t *testing.T) {
	t.Parallel()
	f := startFormatTest(t, "avro", "--user-from", "json:user.id")
	at := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond)
	f.produce(t, 1, 4, "v1", at)
	f.waitRows(t, 4, 60*time.Second)
	// The producer registers a new version of the schema (a field added)
	// and writes with it, to the same partition, while the registry is
	// away from the worker.
	f.produceWhileDown(t, 2, 4, "v2", at)
	f.expectLanded(t, 4, at, "v1", "v2")

	good := f.expectSchemaIDs(t, 4)[0].Value
	f.expectDeadLettered(t,
		badValue{[]byte(`{"event_id":"j-1","tenant_id":"acme"}`), "not_framed", ""},
		badValue{unknownID(good[5:]), "unknown_schema", ""},
		badValue{append(append([]byte{}, good[:5]...), 0x7f, 0x01), "undecodable", ""},
	)
	if err := f.stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
