package schema

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellttl/cellttl/event"
)

// serialized is text's schema as Confluent's serializers register it: the
// base64 of its FileDescriptorProto, named as the producer's file was.
func serialized(t testing.TB, name, text string, imports map[string]string) string {
	t.Helper()
	fd, err := compileProto(context.Background(), text, imports)
	if err != nil {
		t.Fatal(err)
	}
	fdp := protodesc.ToFileDescriptorProto(fd)
	fdp.Name = proto.String(name)
	// Without json_name, as Confluent's Python serializer registers a
	// descriptor built with descriptor_pb2 (protoc writes it).
	var strip func(ms []*descriptorpb.DescriptorProto)
	strip = func(ms []*descriptorpb.DescriptorProto) {
		for _, m := range ms {
			for _, f := range m.Field {
				f.JsonName = nil
			}
			strip(m.NestedType)
		}
	}
	strip(fdp.MessageType)
	b, err := proto.Marshal(fdp)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// A schema registered as a base64 FileDescriptorProto (Confluent's
// serializers do, and registries other than Confluent's return it as
// stored) reads values as its .proto text does: every event of such a
// producer was an invalid_schema letter.
func TestProtobufSerializedDescriptor(t *testing.T) {
	c, m := compile(t, Protobuf, serialized(t, "click.proto", clickProto, nil), event.DefaultFields())
	at := time.Date(2026, 11, 21, 9, 0, 0, 123_456_789, time.UTC)
	v := protoValue(t, c, func(msg *dynamicpb.Message, md protoreflect.MessageDescriptor) {
		setStr(msg, md, "event_id", "e-1")
		setStr(msg, md, "tenant_id", "acme")
		setStr(msg, md, "user_id", "u-42")
		msg.Set(md.Fields().ByName("occurred_at"), protoreflect.ValueOfMessage(timestamppb.New(at).ProtoReflect()))
	})
	ev, err := decoder(5, c, m).DecodeRecord(&event.Source{Value: v, Time: recordTime})
	if err != nil {
		t.Fatal(err)
	}
	// Click is the file's second message: the index [1].
	if ev.ID != "e-1" || ev.Tenant != "acme" || ev.User != "u-42" || !ev.Base.Equal(at) {
		t.Fatalf("got %+v", ev)
	}
}

const ctxProto = `syntax = "proto3";
package ref;
message Ctx { string session = 1; int64 ts = 2; }`

const withRefProto = `syntax = "proto3";
package test;
import "ref/ctx.proto";
message Click { string tenant_id = 2; string user_id = 3; ref.Ctx ctx = 6; }`

// A schema and its references mix the two forms, each read as it comes.
func TestProtobufSerializedReferences(t *testing.T) {
	fields := event.Fields{EventID: "json:ctx.session", Tenant: "json:tenant_id", User: "json:user_id", Time: "json:ctx.ts", TimeFormat: "unix-ms"}
	refText := ctxProto
	refBinary := serialized(t, "ref/ctx.proto", ctxProto, nil)
	mainText := withRefProto
	mainBinary := serialized(t, "click.proto", withRefProto, map[string]string{"ref/ctx.proto": ctxProto})
	for name, tc := range map[string]struct{ main, ref string }{
		"text imports binary":   {mainText, refBinary},
		"binary imports binary": {mainBinary, refBinary},
		"binary imports text":   {mainBinary, refText},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := fields.Compile(event.Labels{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := Compile(context.Background(), Protobuf, Source{Type: Protobuf.registryType(), Text: tc.main, Refs: []Ref{{Name: "ref/ctx.proto", Text: tc.ref}}}, m)
			if err != nil {
				t.Fatal(err)
			}
			md := c.protoMessages[messageIndex{depth: 1}]
			msg := dynamicpb.NewMessage(md)
			msg.Set(md.Fields().ByName("tenant_id"), protoreflect.ValueOfString("acme"))
			ctx := msg.Mutable(md.Fields().ByName("ctx")).Message()
			ctx.Set(ctx.Descriptor().Fields().ByName("session"), protoreflect.ValueOfString("s-1"))
			ctx.Set(ctx.Descriptor().Fields().ByName("ts"), protoreflect.ValueOfInt64(1795251600123))
			b, err := proto.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := decoder(5, c, m).DecodeRecord(&event.Source{Value: append(frame(5, nil), append([]byte{0}, b...)...), Time: recordTime})
			if err != nil {
				t.Fatal(err)
			}
			if ev.ID != "s-1" || ev.Tenant != "acme" || ev.Base.UnixMilli() != 1795251600123 {
				t.Fatalf("got %+v", ev)
			}
		})
	}
}

// Base64 that is no descriptor, and a descriptor nesting past the bound a
// text schema's braces have, are refused with the form named.
func TestProtobufSerializedRefused(t *testing.T) {
	deep := &descriptorpb.DescriptorProto{Name: proto.String("M")}
	for range 200 {
		deep = &descriptorpb.DescriptorProto{Name: proto.String("M"), NestedType: []*descriptorpb.DescriptorProto{deep}}
	}
	b, err := proto.Marshal(&descriptorpb.FileDescriptorProto{Name: proto.String("deep.proto"), Syntax: proto.String("proto3"), MessageType: []*descriptorpb.DescriptorProto{deep}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := event.DefaultFields().Compile(event.Labels{})
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"not a descriptor": base64.StdEncoding.EncodeToString([]byte("\xff\xff\xff\xff garbage")),
		"nesting 200 deep": base64.StdEncoding.EncodeToString(b),
	} {
		_, err := Compile(context.Background(), Protobuf, Source{Type: Protobuf.registryType(), Text: text}, m)
		if err == nil || !strings.Contains(err.Error(), "base64 FileDescriptorProto") {
			t.Errorf("%s: %v, want an error naming the form", name, err)
		}
	}
}
