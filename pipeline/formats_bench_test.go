package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	_ "google.golang.org/protobuf/types/known/timestamppb" // registers google/protobuf/timestamp.proto

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/schema"
	"github.com/cellttl/cellttl/tenants"
)

// oneSchema reads values of one compiled schema: the registry's cache
// with one entry, without a registry.
type oneSchema struct{ c *schema.Compiled }

func (o oneSchema) ReadValue(value []byte, _ *event.Mapping) (event.Found, error) {
	_, rest, err := schema.SchemaID(value)
	if err != nil {
		return event.Found{}, err
	}
	return o.c.Read(rest)
}

const benchAvro = `{"type":"record","name":"Click","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
{"name":"user_id","type":["null","string"]},{"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}},
{"name":"page","type":"string"},{"name":"referrer","type":"string"},{"name":"payload","type":"string"}]}`

const benchProto = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Click { string event_id = 1; string tenant_id = 2; optional string user_id = 3; google.protobuf.Timestamp occurred_at = 4;
  string page = 5; string referrer = 6; string payload = 7; }`

func framed(payload []byte, index ...byte) []byte {
	b := make([]byte, 5, 6+len(payload))
	binary.BigEndian.PutUint32(b[1:], 1)
	return append(append(b, index...), payload...)
}

// BenchmarkHotPathFormats is BenchmarkHotPath's contract event in each
// value format: the same fields and payload, written in Avro (by
// hamba/avro) and Protobuf (by the Go runtime), read through their
// compiled schema (the registry's cache hit).
func BenchmarkHotPathFormats(b *testing.B) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)
	m, err := event.DefaultFields().Compile(event.Labels{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json", func(b *testing.B) { hotPath(b, event.DefaultFields(), hotPathShapes[0].msg, nil) })
	avroValue, err := avro.Marshal(avro.MustParse(benchAvro), map[string]any{"event_id": "e-123456", "tenant_id": "acme", "user_id": "u-42",
		"occurred_at": at, "page": "/pricing", "referrer": "https://example.com/", "payload": payload})
	if err != nil {
		b.Fatal(err)
	}
	ac, err := schema.Compile(context.Background(), schema.Avro, schema.Source{Type: sr.TypeAvro, Text: benchAvro}, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("avro", func(b *testing.B) {
		hotPathWith(b, event.DefaultFields(), ingest.Message{Value: framed(avroValue)}, oneSchema{ac})
	})
	pc, err := schema.Compile(context.Background(), schema.Protobuf, schema.Source{Type: sr.TypeProtobuf, Text: benchProto}, m)
	if err != nil {
		b.Fatal(err)
	}
	protoValue, fdp := protoClick(b, at)
	b.Run("protobuf", func(b *testing.B) {
		hotPathWith(b, event.DefaultFields(), ingest.Message{Value: framed(protoValue, 0)}, oneSchema{pc})
	})
	// The same schema as Confluent's serializers register it, a base64
	// FileDescriptorProto: compiled once, as text is, the values read by
	// the same walk.
	desc, err := proto.Marshal(fdp)
	if err != nil {
		b.Fatal(err)
	}
	sc, err := schema.Compile(context.Background(), schema.Protobuf, schema.Source{Type: sr.TypeProtobuf, Text: base64.StdEncoding.EncodeToString(desc)}, m)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("protobuf-serialized", func(b *testing.B) {
		hotPathWith(b, event.DefaultFields(), ingest.Message{Value: framed(protoValue, 0)}, oneSchema{sc})
	})
}

// protoClick encodes the benchmark's click with the Go Protobuf runtime,
// and returns its schema's descriptor.
func protoClick(b *testing.B, at time.Time) ([]byte, *descriptorpb.FileDescriptorProto) {
	ts := &descriptorpb.FieldDescriptorProto{Name: proto.String("occurred_at"), Number: proto.Int32(4), Type: descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: proto.String(".google.protobuf.Timestamp")}
	var fields []*descriptorpb.FieldDescriptorProto
	for i, n := range []string{"event_id", "tenant_id", "user_id", "", "page", "referrer", "payload"} {
		if n == "" {
			fields = append(fields, ts)
			continue
		}
		fields = append(fields, &descriptorpb.FieldDescriptorProto{Name: proto.String(n), Number: proto.Int32(int32(i + 1)), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()})
	}
	fdp := &descriptorpb.FileDescriptorProto{Name: proto.String("click.proto"), Syntax: proto.String("proto3"), Dependency: []string{"google/protobuf/timestamp.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Click"), Field: fields}}}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		// The timestamp import is resolved from the global registry.
		b.Fatal(err)
	}
	md := fd.Messages().Get(0)
	msg := dynamicpb.NewMessage(md)
	set := func(n, v string) { msg.Set(md.Fields().ByName(protoreflect.Name(n)), protoreflect.ValueOfString(v)) }
	set("event_id", "e-123456")
	set("tenant_id", "acme")
	set("user_id", "u-42")
	set("page", "/pricing")
	set("referrer", "https://example.com/")
	set("payload", payload)
	tsm := msg.Mutable(md.Fields().ByName("occurred_at")).Message()
	tsd := tsm.Descriptor()
	tsm.Set(tsd.Fields().ByName("seconds"), protoreflect.ValueOfInt64(at.Unix()))
	tsm.Set(tsd.Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(at.Nanosecond())))
	v, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	return v, fdp
}

// hotPathWith is hotPath with values read by r.
func hotPathWith(b *testing.B, fields event.Fields, msg ingest.Message, r event.ValueReader) {
	cfg, err := tenants.Load("../tenants.yaml")
	if err != nil {
		b.Fatal(err)
	}
	pc := DefaultConfig()
	pc.Fields = fields
	if err := pc.Resolve(); err != nil {
		b.Fatal(err)
	}
	pc.Decoder.Values = r
	msg.Time = time.Date(2026, 11, 21, 9, 0, 1, 0, time.UTC)
	b.SetBytes(int64(len(msg.Value)))
	b.ReportAllocs()
	var dec Decision
	for b.Loop() {
		dec = Decide(&pc.Decoder, cfg, nil, &msg, msg.Time, time.Time{})
	}
	if dec.Fate != Write || dec.Event.ID != "e-123456" || dec.Event.User != "u-42" || dec.Event.Base.UnixMilli() != 1795251600123 {
		b.Fatalf("fate %d event %+v (%v)", dec.Fate, dec.Event, dec.Err)
	}
}
