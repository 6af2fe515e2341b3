package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Protobuf values as Confluent's serializer frames them (magic byte 0,
// the schema id, the message indexes), each message serialized by
// Google's protobuf-java from the .proto the registry holds, land with
// the contract's cells: tenant and user read from a nested message
// (--tenant-from json:context.tenant), the time a google.protobuf.Timestamp
// finer than a millisecond. The schema evolves mid-partition, while the
// registry is away from the worker (which holds: nothing dead-lettered,
// /readyz 503, until it is back): a message declared before Click, which
// is then message [1], indexes written as a count and the index. Values
// without the framing, of an unknown id, naming a message the schema does
// not have, or not decoding (Apicurio's own serializer's among them, which
// does not write the indexes) are dead-lettered with their classes.
func TestProtobufThroughTheRegistry(t *testing.T) {
	t.Parallel()
	f := startFormatTest(t, "protobuf", "--tenant-from", "json:context.tenant", "--user-from", "json:context.user")
	at := time.Now().Add(-5 * time.Minute).Truncate(time.Second).Add(123456789 * time.Nanosecond)
	f.produce(t, 1, 4, "v1", at)
	f.waitRows(t, 4, 60*time.Second)
	f.produceWhileDown(t, 2, 4, "v2", at)
	f.expectLanded(t, 4, at, "v1", "v2")

	// The values are framed as the test means them to be: Click, the first
	// message of version 1, as the single 0 that stands for [0] (the last
	// as [0] in the long form: a count of 1, index 0, zigzag varints 02
	// 00); of version 2, [1]: a count of 1, index 1.
	produced := f.expectSchemaIDs(t, 4)
	for i, m := range produced {
		want := []byte{0}
		switch {
		case i == 3:
			want = []byte{2, 0}
		case i >= 4:
			want = []byte{2, 2}
		}
		if len(m.Value) < 5+len(want) || !bytes.Equal(m.Value[5:5+len(want)], want) {
			t.Fatalf("produced value %d: % x, want the message indexes % x after the schema id", i, m.Value, want)
		}
	}

	// Apicurio's own Protobuf serializer writes a length-delimited
	// reference to the message where Confluent's indexes belong.
	testenv.CreateTopic(t, f.brokers, f.topic+"-apicurio", 1)
	f.runProducer(t, "protobuf-apicurio", f.topic+"-apicurio", 1, 1, "a", at)
	apicurio := testenv.ReadAll(t, f.brokers, f.topic+"-apicurio", 1, 10*time.Second)
	if len(apicurio) != 1 {
		t.Fatalf("%d values of Apicurio's serializer, want 1", len(apicurio))
	}

	good := produced[0].Value // schema version 1, message [0]
	f.expectDeadLettered(t,
		badValue{apicurio[0].Value, "undecodable", `the Protobuf message index has -4 entries, want 1..16; the value names its message "Click" where Confluent's framing has message indexes`},
		badValue{[]byte(`{"event_id":"j-1","context":{"tenant":"acme"}}`), "not_framed", ""},
		badValue{unknownID(good[5:]), "unknown_schema", ""},
		// Message [5] of a schema of one message.
		badValue{append(append([]byte{}, good[:5]...), append([]byte{2, 10}, good[6:]...)...), "invalid_schema", "message [5]"},
		// A message index of -64 entries.
		badValue{append(append([]byte{}, good[:5]...), 0x7f), "undecodable", "-64 entries"},
		// A field of wire type 7, which Protobuf does not have.
		badValue{append(append([]byte{}, good[:6]...), 0x7f, 0x01), "undecodable", "field 15"},
	)
	if err := f.stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
