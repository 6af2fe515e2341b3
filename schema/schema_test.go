package schema

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
)

// fixed reads values of the schemas it was given, by id: the registry's
// part without a registry.
type fixed map[uint32]*Compiled

func (f fixed) ReadValue(value []byte, _ *event.Mapping) (event.Found, error) {
	id, rest, err := SchemaID(value)
	if err != nil {
		return event.Found{}, err
	}
	c := f[id]
	if c == nil {
		return event.Found{}, &event.Error{Class: event.UnknownSchema, Reason: "unknown id"}
	}
	return c.Read(rest)
}

// frame is the Confluent framing of payload under id.
func frame(id uint32, payload []byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], id)
	return append(b, payload...)
}

const clickAvro = `{"type":"record","name":"Click","namespace":"test","fields":[
 {"name":"event_id","type":"string"},
 {"name":"tenant_id","type":"string"},
 {"name":"user_id","type":["null","string"],"default":null},
 {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"props","type":{"type":"map","values":"double"}},
 {"name":"payload","type":"bytes"}]}`

func compile(t testing.TB, format Format, text string, fields event.Fields, refs ...Ref) (*Compiled, *event.Mapping) {
	t.Helper()
	m, err := fields.Compile(event.Labels{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(context.Background(), format, Source{Type: format.registryType(), Text: text, Refs: refs}, m)
	if err != nil {
		t.Fatal(err)
	}
	return c, m
}

func decoder(id uint32, c *Compiled, m *event.Mapping) event.Decoder {
	return event.Decoder{MaxBytes: 1 << 20, MaxClockSkew: 5 * time.Minute, Mapping: m, Values: fixed{id: c}}
}

var recordTime = time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)

func TestAvroContract(t *testing.T) {
	c, m := compile(t, Avro, clickAvro, event.DefaultFields())
	s := avro.MustParse(clickAvro)
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)
	for _, tc := range []struct {
		name string
		user any
		want string
	}{{"user", "u-42", "u-42"}, {"null user", nil, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			payload, err := avro.Marshal(s, map[string]any{"event_id": "e-1", "tenant_id": "acme", "user_id": tc.user, "occurred_at": at,
				"tags": []string{"a", "b"}, "props": map[string]any{"x": 1.5}, "payload": []byte("xyz")})
			if err != nil {
				t.Fatal(err)
			}
			d := decoder(7, c, m)
			ev, err := d.DecodeRecord(&event.Source{Value: frame(7, payload), Time: recordTime})
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "e-1" || ev.Tenant != "acme" || ev.User != tc.want || !ev.Base.Equal(at) {
				t.Fatalf("got %+v", ev)
			}
		})
	}
}

// Every way a value can be wrong gets its class and a reason that names
// the field and the value.
func TestAvroRejects(t *testing.T) {
	text := `{"type":"record","name":"E","fields":[
	 {"name":"event_id","type":["null","string","long"]},
	 {"name":"tenant_id","type":"string"},
	 {"name":"ts","type":["null","long","string","double"]},
	 {"name":"ctx","type":["null","string",{"type":"record","name":"Ctx","fields":[{"name":"user","type":"string"}]}]}]}`
	fields := event.Fields{EventID: "json:event_id", Tenant: "json:tenant_id", User: "json:ctx.user", Time: "json:ts", TimeFormat: "unix-ms"}
	c, m := compile(t, Avro, text, fields)
	s := avro.MustParse(text)
	enc := func(v map[string]any) []byte {
		t.Helper()
		b, err := avro.Marshal(s, v)
		if err != nil {
			t.Fatal(err)
		}
		return frame(3, b)
	}
	base := func() map[string]any {
		return map[string]any{"event_id": "e-1", "tenant_id": "acme", "ts": int64(1795251600123), "ctx": map[string]any{"Ctx": map[string]any{"user": "u-1"}}}
	}
	with := func(k string, v any) []byte { b := base(); b[k] = v; return enc(b) }
	good := enc(base())
	for _, tc := range []struct {
		name   string
		value  []byte
		class  event.Class
		reason string
	}{
		{"event id null", with("event_id", nil), event.Missing, "event_id is missing"},
		{"event id a long", with("event_id", int64(4711)), event.WrongType, "event_id must be a string, not an Avro long"},
		{"time a string under unix-ms", with("ts", "2026-11-21T09:00:00Z"), event.WrongType, "ts must be a number of epoch milliseconds (TimeFormat unix-ms), not an Avro string"},
		{"time out of range", with("ts", int64(1e16)), event.BadTime, "ts 10000000000000000 is not within the range"},
		{"parent a string", with("ctx", "nope"), event.WrongType, "ctx.user cannot be read: ctx is an Avro string, not a record"},
		{"parent null", with("ctx", nil), "", ""},
		{"unframed", []byte(`{"event_id":"e-1"}`), event.NotFramed, "first byte is 0x7b"},
		{"short", []byte{0, 0, 0}, event.NotFramed, "shorter than the 5 bytes"},
		{"unknown id", frame(99, good[5:]), event.UnknownSchema, ""},
		{"cut short", good[:len(good)-2], event.Undecodable, "does not decode"},
		{"trailing bytes", append(append([]byte{}, good...), 0), event.Undecodable, "1 bytes are left"},
		{"bad union branch", append(append(append([]byte{}, good[:5]...), 9), good[6:]...), event.Undecodable, "union branch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decoder(3, c, m)
			ev, err := d.DecodeRecord(&event.Source{Value: tc.value, Time: recordTime})
			if tc.class == "" {
				if err != nil || ev.User != "" {
					t.Fatalf("got %+v, %v", ev, err)
				}
				return
			}
			var e *event.Error
			if !errors.As(err, &e) || e.Class != tc.class {
				t.Fatalf("got %+v, %v; want class %s", ev, err, tc.class)
			}
			if want, _, _ := strings.Cut(tc.reason, "..."); !strings.Contains(e.Reason, want) {
				t.Fatalf("reason %q, want it to hold %q", e.Reason, want)
			}
		})
	}
}

func TestFormatMismatchIsAnInvalidSchema(t *testing.T) {
	m, _ := event.DefaultFields().Compile(event.Labels{})
	_, err := Compile(context.Background(), Avro, Source{Type: sr.TypeProtobuf, Text: "syntax = \"proto3\";"}, m)
	if err == nil || !strings.Contains(err.Error(), "PROTOBUF schema") {
		t.Fatalf("got %v", err)
	}
}
