package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// protoClick is message 1 of its file, so that values name it by a
// message index other than the first's.
const protoClick = `syntax = "proto3";
package cellttl.test;
message Other { string x = 1; }
message Click {
  string event_id = 1;
  string tenant_id = 2;
  string user_id = 3;
  string occurred_at = 4;
  string page = 5;
}
`

// goProduce registers a schema of format through the registry's
// Confluent-compatible API and produces count click events under it
// (event ids PREFIX-i, users u-(i%3), pages /p/i, tenant acme), framed as
// Confluent's serializers frame them.
func goProduce(t *testing.T, format string, e *env, ccompat string, count int, prefix string, at time.Time) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client, err := sr.NewClient(sr.URLs(ccompat), sr.HTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	s := sr.Schema{Type: sr.TypeProtobuf, Schema: protoClick}
	switch format {
	case "avro":
		s = sr.Schema{Type: sr.TypeAvro, Schema: `{"type":"record","name":"Click","namespace":"cellttl.test","fields":[` +
			`{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},{"name":"user_id","type":"string"},` +
			`{"name":"occurred_at","type":"string"},{"name":"page","type":"string"}]}`}
	case "json-schema":
		s = sr.Schema{Type: sr.TypeJSON, Schema: `{"type":"object","properties":{"event_id":{"type":"string"},"tenant_id":{"type":"string"},` +
			`"user_id":{"type":"string"},"occurred_at":{"type":"string","format":"date-time"},"page":{"type":"string"}},"required":["event_id","tenant_id"]}`}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss, err := client.CreateSchema(ctx, testenv.Name(e.topic+"-value"), s)
	if err != nil {
		t.Fatalf("register the %s schema: %v", format, err)
	}
	var msgs []kafka.Message
	for i := range count {
		fields := []string{fmt.Sprintf("%s-%d", prefix, i), "acme", fmt.Sprint("u-", i%3), at.UTC().Format(time.RFC3339Nano), fmt.Sprint("/p/", i)}
		v := binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID))
		switch format {
		case "avro":
			// Avro's binary encoding of a record of strings: each a zigzag
			// varint length, then its bytes, in the schema's order.
			for _, f := range fields {
				v = binary.AppendVarint(v, int64(len(f)))
				v = append(v, f...)
			}
		case "json-schema":
			doc, err := json.Marshal(map[string]string{"event_id": fields[0], "tenant_id": fields[1], "user_id": fields[2], "occurred_at": fields[3], "page": fields[4]})
			if err != nil {
				t.Fatal(err)
			}
			v = append(v, doc...)
		default:
			v = append(v, 2, 2) // the message index [1]: a count of 1, then 1, zigzag
			for n, f := range fields {
				v = protowire.AppendTag(v, protowire.Number(n+1), protowire.BytesType)
				v = protowire.AppendString(v, f)
			}
		}
		msgs = append(msgs, kafka.Message{Key: []byte("acme"), Value: v})
	}
	testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)
}
