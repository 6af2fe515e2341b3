package schema

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellttl/cellttl/event"
)

// allAvro has a field of each Avro type, unions with null first and last,
// both timestamp units and a recursive record.
const allAvro = `{"type":"record","name":"All","namespace":"test","fields":[
 {"name":"id","type":"string"},
 {"name":"n","type":"int"},
 {"name":"big","type":"long"},
 {"name":"ok","type":"boolean"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"nan","type":"double"},
 {"name":"raw","type":"bytes"},
 {"name":"fx","type":{"type":"fixed","name":"F2","size":2}},
 {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"ms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"us","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"null_first","type":["null","string"]},
 {"name":"null_last","type":["string","null"]},
 {"name":"absent","type":["null","string"]},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"props","type":{"type":"map","values":"double"}},
 {"name":"ctx","type":{"type":"record","name":"Ctx","fields":[{"name":"user","type":"string"},{"name":"next","type":["null","Ctx"]}]}}]}`

// A whole Avro value decodes into JSON, each type as JSON readers expect
// it; the value is encoded by hamba/avro's encoder, the decoder is ours.
func TestAvroJSON(t *testing.T) {
	c, _ := compile(t, Avro, allAvro, event.DefaultFields())
	v, err := avro.Marshal(avro.MustParse(allAvro), map[string]any{
		"id": "e-1", "n": int32(-7), "big": int64(9007199254740993), "ok": true, "f": float32(1.5), "d": -0.25, "nan": math.NaN(),
		"raw": []byte("xyz"), "fx": [2]byte{1, 2}, "color": "GREEN",
		"ms": time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC), "us": time.Date(2026, 11, 21, 9, 0, 0, 123_456_000, time.UTC),
		"null_first": "a & b", "null_last": "z", "absent": nil,
		"tags": []string{"a", "b"}, "props": map[string]float64{"x": 1.5},
		"ctx": map[string]any{"user": "u-1", "next": map[string]any{"test.Ctx": map[string]any{"user": "u-2", "next": nil}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"e-1","n":-7,"big":9007199254740993,"ok":true,"f":1.5,"d":-0.25,"nan":"NaN","raw":"eHl6","fx":"AQI=","color":"GREEN",` +
		`"ms":"2026-11-21T09:00:00.123Z","us":"2026-11-21T09:00:00.123456Z","null_first":"a & b","null_last":"z","absent":null,` +
		`"tags":["a","b"],"props":{"x":1.5},"ctx":{"user":"u-1","next":{"user":"u-2","next":null}}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}

	for name, bad := range map[string][]byte{
		"cut short":      v[:len(v)-3],
		"trailing bytes": append(append([]byte{}, v...), 0),
		"empty":          nil,
	} {
		_, err := c.JSON(bad)
		var e *event.Error
		if !errors.As(err, &e) || e.Class != event.Undecodable {
			t.Errorf("%s: got %v, want an undecodable *event.Error", name, err)
		}
	}
}

// The event time of a timestamp-micros field is read in microseconds, of
// a timestamp-millis field in milliseconds: the two read the other way
// are 1000 times off.
func TestAvroTimestampUnits(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)
	for _, unit := range []string{"timestamp-millis", "timestamp-micros"} {
		t.Run(unit, func(t *testing.T) {
			text := `{"type":"record","name":"E","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
			 {"name":"occurred_at","type":{"type":"long","logicalType":"` + unit + `"}}]}`
			c, m := compile(t, Avro, text, event.DefaultFields())
			// Encoded as a plain long, so that the units are the test's own.
			n := at.UnixMilli()
			if unit == "timestamp-micros" {
				n = at.UnixMicro()
			}
			payload, err := avro.Marshal(avro.MustParse(`{"type":"record","name":"E","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},{"name":"occurred_at","type":"long"}]}`),
				map[string]any{"event_id": "e-1", "tenant_id": "acme", "occurred_at": n})
			if err != nil {
				t.Fatal(err)
			}
			d := decoder(1, c, m)
			ev, err := d.DecodeRecord(&event.Source{Value: frame(1, payload), Time: recordTime})
			if err != nil {
				t.Fatal(err)
			}
			if !ev.Base.Equal(at) {
				t.Fatalf("event time %s, want %s", ev.Base, at)
			}
		})
	}
}

// A value's Protobuf message index selects the message it decodes as: the
// first message ([0], written as a count of 0), another top-level one
// ([1]), a nested one ([1, 0]).
func TestProtobufJSON(t *testing.T) {
	c, _ := compile(t, Protobuf, clickProto, event.DefaultFields())
	fd, err := compileProto(t.Context(), clickProto, nil)
	if err != nil {
		t.Fatal(err)
	}
	encode := func(md protoreflect.MessageDescriptor, set func(m *dynamicpb.Message)) []byte {
		msg := dynamicpb.NewMessage(md)
		set(msg)
		b, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	click := fd.Messages().ByName("Click")
	ctx := click.Messages().ByName("Ctx")
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_456_789, time.UTC)
	for _, tc := range []struct {
		name  string
		index []byte // the framing's message index, zigzag varints
		value []byte
		want  string
	}{
		{"first message", []byte{0}, encode(fd.Messages().ByName("Other"), func(m *dynamicpb.Message) {
			setStr(m, fd.Messages().ByName("Other"), "x", "o-1")
		}), `{"x":"o-1"}`},
		{"second message", []byte{2, 2}, encode(click, func(m *dynamicpb.Message) {
			setStr(m, click, "event_id", "e-1")
			setStr(m, click, "user_id", "u-42")
			m.Set(click.Fields().ByName("occurred_at"), protoreflect.ValueOfMessage(timestamppb.New(at).ProtoReflect()))
			m.Mutable(click.Fields().ByName("tags")).List().Append(protoreflect.ValueOfString("a"))
			cm := m.Mutable(click.Fields().ByName("ctx")).Message()
			cm.Set(ctx.Fields().ByName("ts"), protoreflect.ValueOfInt64(5))
		}), `{"event_id":"e-1","user_id":"u-42","occurred_at":"2026-11-21T09:00:00.123456789Z","tags":["a"],"ctx":{"ts":"5"}}`},
		{"nested message", []byte{4, 2, 0}, encode(ctx, func(m *dynamicpb.Message) {
			setStr(m, ctx, "session", "s-1")
			m.Set(ctx.Fields().ByName("ts"), protoreflect.ValueOfInt64(7))
		}), `{"session":"s-1","ts":"7"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.JSON(append(append([]byte{}, tc.index...), tc.value...))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	var e *event.Error
	if _, err := c.JSON([]byte{2, 40}); !errors.As(err, &e) || e.Class != event.BadSchema {
		t.Errorf("message [20]: got %v, want invalid_schema", err)
	}
	if _, err := c.JSON([]byte{2, 2, 0xff}); !errors.As(err, &e) || e.Class != event.Undecodable {
		t.Errorf("a cut tag: got %v, want undecodable", err)
	}
}

func TestJSONSchemaJSON(t *testing.T) {
	c, _ := compile(t, JSONSchema, `{"type":"object"}`, event.DefaultFields())
	got, err := c.JSON([]byte(" {\"a\" : 1,\n \"u\":\"https://x/?a=1&b=2\"} "))
	if err != nil || string(got) != `{"a":1,"u":"https://x/?a=1&b=2"}` {
		t.Fatalf("got %s, %v", got, err)
	}
	var e *event.Error
	if _, err := c.JSON([]byte("nope")); !errors.As(err, &e) || e.Class != event.Undecodable {
		t.Fatalf("got %v, want undecodable", err)
	}
}

// A mapped field in an optional reads the same whichever side of the union
// null is on.
func TestAvroUnionOrder(t *testing.T) {
	for _, union := range []string{`["null","string"]`, `["string","null"]`} {
		text := `{"type":"record","name":"E","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
		 {"name":"user_id","type":` + union + `},{"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}}]}`
		c, m := compile(t, Avro, text, event.DefaultFields())
		for _, user := range []any{"u-42", nil} {
			payload, err := avro.Marshal(avro.MustParse(text), map[string]any{"event_id": "e-1", "tenant_id": "acme", "user_id": user, "occurred_at": recordTime})
			if err != nil {
				t.Fatal(err)
			}
			d := decoder(1, c, m)
			ev, err := d.DecodeRecord(&event.Source{Value: frame(1, payload), Time: recordTime})
			if want, _ := user.(string); err != nil || ev.User != want {
				t.Errorf("user_id %s holding %v: got %q, %v", union, user, ev.User, err)
			}
		}
	}
}
