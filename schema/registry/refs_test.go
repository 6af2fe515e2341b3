package registry

import (
	"errors"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cellttl/cellttl/event"
)

// References, fetched by subject and version, and theirs in turn: an Avro
// record whose field is a named type of another subject (itself naming an
// enum of a third), and a .proto importing another (importing a third).
// The mapped field is read through the referenced type, and the whole
// value decodes.
func TestReferences(t *testing.T) {
	const (
		kindAvro = `{"type":"enum","name":"Kind","namespace":"test","symbols":["PAGE","SEARCH"]}`
		ctxAvro  = `{"type":"record","name":"Ctx","namespace":"test","fields":[{"name":"user","type":"string"},{"name":"kind","type":"test.Kind"}]}`
		mainAvro = `{"type":"record","name":"Click","namespace":"test","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
		 {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"ctx","type":"test.Ctx"}]}`
		kindProto = `syntax = "proto3"; package test; enum Kind { PAGE = 0; SEARCH = 1; }`
		ctxProto  = `syntax = "proto3"; package test; import "kind.proto"; message Ctx { string user = 1; Kind kind = 2; }`
		mainProto = `syntax = "proto3"; package test; import "ctx.proto"; import "google/protobuf/timestamp.proto";
		 message Click { string event_id = 1; string tenant_id = 2; google.protobuf.Timestamp occurred_at = 3; Ctx ctx = 4; }`
	)
	f := newFake()
	f.addVersion("kind", 3, sr.Schema{Schema: kindAvro})
	f.addVersion("ctx", 1, sr.Schema{Schema: ctxAvro, References: []sr.SchemaReference{{Name: "test.Kind", Subject: "kind", Version: 3}}})
	f.add(10, sr.Schema{Schema: mainAvro, References: []sr.SchemaReference{{Name: "test.Ctx", Subject: "ctx", Version: 1}}})
	f.add(11, sr.Schema{Schema: mainAvro, References: []sr.SchemaReference{{Name: "test.Ctx", Subject: "gone", Version: 1}}})
	f.addVersion("kind-proto", 1, sr.Schema{Type: sr.TypeProtobuf, Schema: kindProto})
	f.addVersion("ctx-proto", 2, sr.Schema{Type: sr.TypeProtobuf, Schema: ctxProto, References: []sr.SchemaReference{{Name: "kind.proto", Subject: "kind-proto", Version: 1}}})
	f.add(20, sr.Schema{Type: sr.TypeProtobuf, Schema: mainProto, References: []sr.SchemaReference{{Name: "ctx.proto", Subject: "ctx-proto", Version: 2}}})
	url := f.serve(t)
	fields := event.DefaultFields()
	fields.User = "json:ctx.user"
	m := contractMapping(t, fields)

	cache := &avro.SchemaCache{}
	for _, text := range []string{kindAvro, ctxAvro} {
		if _, err := avro.ParseWithCache(text, "", cache); err != nil {
			t.Fatal(err)
		}
	}
	mainSchema, err := avro.ParseWithCache(mainAvro, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	avroPayload, err := avro.Marshal(mainSchema, map[string]any{"event_id": "e-1", "tenant_id": "acme", "occurred_at": at,
		"ctx": map[string]any{"user": "u-7", "kind": "SEARCH"}})
	if err != nil {
		t.Fatal(err)
	}
	// Click{event_id: "e-2", tenant_id: "acme", occurred_at: at, ctx: {user: "u-8", kind: SEARCH}}
	// by hand on the wire, after the message index [0] (a count of 0).
	var ts, ctx, click []byte
	ts = protowire.AppendTag(ts, 1, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(at.Unix()))
	ts = protowire.AppendTag(ts, 2, protowire.VarintType)
	ts = protowire.AppendVarint(ts, uint64(at.Nanosecond()))
	ctx = protowire.AppendTag(ctx, 1, protowire.BytesType)
	ctx = protowire.AppendString(ctx, "u-8")
	ctx = protowire.AppendTag(ctx, 2, protowire.VarintType)
	ctx = protowire.AppendVarint(ctx, 1)
	for _, f := range []struct {
		n protowire.Number
		v []byte
	}{{1, []byte("e-2")}, {2, []byte("acme")}, {3, ts}, {4, ctx}} {
		click = protowire.AppendTag(click, f.n, protowire.BytesType)
		click = protowire.AppendBytes(click, f.v)
	}

	for _, tc := range []struct {
		format, user, json string
		value              []byte
	}{
		{"avro", "u-7", `{"event_id":"e-1","tenant_id":"acme","occurred_at":"2026-11-21T09:00:00.123Z","ctx":{"user":"u-7","kind":"SEARCH"}}`, frame(10, avroPayload)},
		{"protobuf", "u-8", `{"event_id":"e-2","tenant_id":"acme","occurred_at":"2026-11-21T09:00:00.123Z","ctx":{"user":"u-8","kind":"SEARCH"}}`, frame(20, append([]byte{0}, click...))},
	} {
		t.Run(tc.format, func(t *testing.T) {
			s, _ := open(t, Config{Format: tc.format, URL: url}, m)
			if err := await(s, tc.value, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			ev, err := (&event.Decoder{MaxBytes: 1 << 20, MaxClockSkew: time.Hour, Mapping: m, Values: s}).DecodeRecord(&event.Source{Value: tc.value, Time: at})
			if err != nil || ev.User != tc.user || !ev.Base.Equal(at) {
				t.Fatalf("got %+v, %v; want user %s at %s", ev, err, tc.user, at)
			}
			doc, err := s.DecodeValue(t.Context(), tc.value)
			if err != nil || string(doc) != tc.json {
				t.Fatalf("DecodeValue: %s, %v\nwant %s", doc, err, tc.json)
			}
		})
	}

	// A reference the registry does not have makes the schema unusable
	// (invalid_schema), not the registry down: no wait.
	s, _ := open(t, Config{URL: url}, m)
	v := frame(11, avroPayload)
	if err := await(s, v, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var e *event.Error
	if _, err := s.ReadValue(v, m); !errors.As(err, &e) || e.Class != event.BadSchema {
		t.Fatalf("a missing reference: %v, want invalid_schema", err)
	}
}
