package schema

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellttl/cellttl/event"
)

const clickProto = `syntax = "proto3";
package test;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message Click {
  string event_id = 1;
  string tenant_id = 2;
  optional string user_id = 3;
  google.protobuf.Timestamp occurred_at = 4;
  repeated string tags = 5;
  Ctx ctx = 6;
  message Ctx { string session = 1; int64 ts = 2; }
}`

// protoValue encodes a Click with the Go Protobuf runtime (dynamicpb), a
// different library from the reader's walk of the wire format.
func protoValue(t testing.TB, c *Compiled, set func(m *dynamicpb.Message, md protoreflect.MessageDescriptor)) []byte {
	t.Helper()
	fd, err := compileProto(context.Background(), clickProto, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Click")
	msg := dynamicpb.NewMessage(md)
	set(msg, md)
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	// Click is message 1 of the file: the index [1].
	return append(frame(5, nil), append([]byte{2, 2}, b...)...)
}

func setStr(m *dynamicpb.Message, md protoreflect.MessageDescriptor, name, v string) {
	m.Set(md.Fields().ByName(protoreflect.Name(name)), protoreflect.ValueOfString(v))
}

func TestProtobufContract(t *testing.T) {
	c, m := compile(t, Protobuf, clickProto, event.DefaultFields())
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_456_789, time.UTC)
	v := protoValue(t, c, func(msg *dynamicpb.Message, md protoreflect.MessageDescriptor) {
		setStr(msg, md, "event_id", "e-1")
		setStr(msg, md, "tenant_id", "acme")
		setStr(msg, md, "user_id", "u-42")
		msg.Set(md.Fields().ByName("occurred_at"), protoreflect.ValueOfMessage(timestamppb.New(at).ProtoReflect()))
		l := msg.Mutable(md.Fields().ByName("tags")).List()
		l.Append(protoreflect.ValueOfString("a"))
	})
	d := decoder(5, c, m)
	ev, err := d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "e-1" || ev.Tenant != "acme" || ev.User != "u-42" || !ev.Base.Equal(at) {
		t.Fatalf("got %+v", ev)
	}
}

func TestProtobufNestedEpoch(t *testing.T) {
	fields := event.Fields{EventID: "json:ctx.session", Tenant: "json:tenant_id", User: "json:user_id", Time: "json:ctx.ts", TimeFormat: "unix-ms"}
	c, m := compile(t, Protobuf, clickProto, fields)
	v := protoValue(t, c, func(msg *dynamicpb.Message, md protoreflect.MessageDescriptor) {
		setStr(msg, md, "tenant_id", "acme")
		ctx := msg.Mutable(md.Fields().ByName("ctx")).Message()
		cmd := md.Messages().ByName("Ctx")
		ctx.Set(cmd.Fields().ByName("session"), protoreflect.ValueOfString("s-1"))
		ctx.Set(cmd.Fields().ByName("ts"), protoreflect.ValueOfInt64(1795251600123))
	})
	d := decoder(5, c, m)
	ev, err := d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "s-1" || ev.User != "" || ev.Base.UnixMilli() != 1795251600123 {
		t.Fatalf("got %+v", ev)
	}
	// A missing required id names the path.
	v = protoValue(t, c, func(msg *dynamicpb.Message, md protoreflect.MessageDescriptor) { setStr(msg, md, "tenant_id", "acme") })
	_, err = d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
	var e *event.Error
	if !errors.As(err, &e) || e.Class != event.Missing || e.Reason != "ctx.session is missing" {
		t.Fatalf("got %v", err)
	}
	// A message index the schema does not have.
	v[6] = 40
	_, err = d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
	if !errors.As(err, &e) || e.Class != event.BadSchema {
		t.Fatalf("got %v", err)
	}
}

// A Timestamp's seconds past what it may hold (0001 to 9999) are an
// invalid time, a letter with the reason: seconds near 2^63 wrapped in
// time.Unix, and the event was skipped as long expired, silently. The
// first and last seconds it holds are read.
func TestProtobufTimestampOutOfRange(t *testing.T) {
	c, m := compile(t, Protobuf, clickProto, event.DefaultFields())
	d := decoder(5, c, m)
	value := func(secs int64) []byte {
		return protoValue(t, c, func(msg *dynamicpb.Message, md protoreflect.MessageDescriptor) {
			setStr(msg, md, "event_id", "e-1")
			setStr(msg, md, "tenant_id", "acme")
			msg.Set(md.Fields().ByName("occurred_at"), protoreflect.ValueOfMessage((&timestamppb.Timestamp{Seconds: secs}).ProtoReflect()))
		})
	}
	for _, secs := range []int64{1<<63 - 1, 253402300800, -62135596801, -1 << 63} {
		_, err := d.DecodeRecord(&event.Source{Value: value(secs), Time: recordTime})
		var e *event.Error
		if !errors.As(err, &e) || e.Class != event.BadTime || e.Field != "occurred_at" {
			t.Errorf("%d seconds: %v, want invalid_time", secs, err)
		}
	}
	for _, secs := range []int64{253402300799, -62135596800} {
		if _, err := d.DecodeRecord(&event.Source{Value: value(secs), Time: time.Unix(secs, 0)}); err != nil {
			var e *event.Error
			if errors.As(err, &e) && e.Class == event.BadTime && strings.Contains(e.Reason, "seconds, outside") {
				t.Errorf("%d seconds, which a Timestamp holds: %v", secs, err)
			}
		}
	}
}

// A value of Apicurio's own Protobuf serializer names its message where
// Confluent's framing has indexes: the refusal says so and names the
// serializer to change to, whether the name's length reads as a bad count
// (odd) or as indexes of no message (even). Bytes that only look alike
// keep the plain refusal.
func TestProtobufApicurioFraming(t *testing.T) {
	c, m := compile(t, Protobuf, clickProto, event.DefaultFields())
	d := decoder(5, c, m)
	ref := func(name string) []byte {
		return append([]byte{byte(2 + len(name)), 0x0a, byte(len(name))}, name...)
	}
	for _, tc := range []struct {
		name    string
		framing []byte
		want    string
	}{
		{"odd length", ref("Click"), `names its message "Click"`},
		{"even length", ref("Clicks"), `names its message "Clicks"`},
		{"not a name", ref("Cl ck"), ""},
		{"not a message", []byte{7, 0x12, 5, 'C', 'l', 'i', 'c', 'k'}, ""},
	} {
		v := append(frame(5, nil), append(tc.framing, 0x0a, 1, 'x')...)
		_, err := d.DecodeRecord(&event.Source{Value: v, Time: recordTime})
		var e *event.Error
		if !errors.As(err, &e) {
			t.Fatalf("%s: %v, want a refusal", tc.name, err)
		}
		if says := strings.Contains(e.Reason, "Apicurio"); says != (tc.want != "") || !strings.Contains(e.Reason, tc.want) {
			t.Errorf("%s: %s (%s), want Apicurio named: %t, and %q", tc.name, e.Reason, e.Class, tc.want != "", tc.want)
		}
	}
}
