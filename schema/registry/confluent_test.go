package registry

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/cellttl/cellttl/event"
)

// The Protobuf schemas of these tests, as .proto text (what Confluent's
// registry renders by default) and as the FileDescriptorProto a
// Confluent serializer registers (what it returns with format=serialized).
const (
	ctxText   = "syntax = \"proto3\";\npackage test;\n\nmessage Ctx {\n  string user = 1;\n}\n"
	clickText = "syntax = \"proto3\";\npackage test;\n\nimport \"ctx.proto\";\n\nmessage Click {\n  string event_id = 1;\n  string tenant_id = 2;\n  .test.Ctx ctx = 3;\n}\n"
)

func descriptor(t *testing.T, fd *descriptorpb.FileDescriptorProto) string {
	t.Helper()
	b, err := proto.Marshal(fd)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func str(name string, n int32) *descriptorpb.FieldDescriptorProto {
	return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()}
}

// confluent answers as Confluent's registry's documented API does, under
// prefix (a context's URL, /contexts/.team-a, or none): a Protobuf schema
// by id and a referenced one by subject and version, as text, or
// serialized when asked with format=serialized. refuse, when set, is the
// status it answers that parameter with instead: 501 as Redpanda before
// 25.2 does, or 500 as Apicurio 3.3.3 does for a schema stored
// serialized (which it then returns as stored, stored). It records the
// format asked of each request.
type confluent struct {
	prefix  string
	refuse  int
	stored  bool
	text    map[string]string // by path
	serial  map[string]string
	mu      sync.Mutex
	formats []string // "path?format" of each request
}

func (c *confluent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	c.mu.Lock()
	c.formats = append(c.formats, r.URL.Path+"?"+format)
	c.mu.Unlock()
	path, ok := strings.CutPrefix(r.URL.Path, c.prefix)
	text, known := c.text[path]
	switch {
	case !ok || !known:
		answer(w, http.StatusNotFound, map[string]any{"error_code": 40403, "message": "Schema not found"})
	case format == "serialized" && c.refuse != 0:
		answer(w, c.refuse, map[string]any{"error_code": c.refuse*100 + 1, "message": "Unsupported format: serialized"})
	case format == "serialized" || c.stored:
		answer(w, http.StatusOK, c.body(path, c.serial[path]))
	case format != "":
		answer(w, http.StatusUnprocessableEntity, map[string]any{"error_code": 42204, "message": "Invalid format"})
	default:
		answer(w, http.StatusOK, c.body(path, text))
	}
}

func (c *confluent) body(path, schema string) map[string]any {
	b := map[string]any{"schemaType": "PROTOBUF", "schema": schema}
	if strings.HasPrefix(path, "/schemas/ids/") {
		b["references"] = []map[string]any{{"name": "ctx.proto", "subject": "ctx.proto", "version": 1}}
	} else {
		b["subject"], b["version"], b["id"] = "ctx.proto", 1, 6
	}
	return b
}

func newConfluent(t *testing.T, prefix string, refuse int, stored bool) (*confluent, string) {
	ctxFD := &descriptorpb.FileDescriptorProto{Name: proto.String("ctx.proto"), Package: proto.String("test"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Ctx"), Field: []*descriptorpb.FieldDescriptorProto{str("user", 1)}}}}
	ctxField := str("ctx", 3)
	ctxField.Type, ctxField.TypeName = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), proto.String(".test.Ctx")
	clickFD := &descriptorpb.FileDescriptorProto{Name: proto.String("click.proto"), Package: proto.String("test"), Syntax: proto.String("proto3"),
		Dependency:  []string{"ctx.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Click"), Field: []*descriptorpb.FieldDescriptorProto{str("event_id", 1), str("tenant_id", 2), ctxField}}}}
	c := &confluent{prefix: prefix, refuse: refuse, stored: stored,
		text:   map[string]string{"/schemas/ids/7": clickText, "/subjects/ctx.proto/versions/1": ctxText, "/schemas/ids/8": clickText},
		serial: map[string]string{"/schemas/ids/7": descriptor(t, clickFD), "/subjects/ctx.proto/versions/1": descriptor(t, ctxFD), "/schemas/ids/8": descriptor(t, clickFD)}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv.URL + prefix
}

// protoClick is Click{event_id, tenant_id: acme, ctx: {user}} framed under
// id, message index [0].
func protoClick(id uint32, eventID, user string) []byte {
	var ctx, click []byte
	ctx = protowire.AppendTag(ctx, 1, protowire.BytesType)
	ctx = protowire.AppendString(ctx, user)
	for _, f := range []struct {
		n protowire.Number
		v []byte
	}{{1, []byte(eventID)}, {2, []byte("acme")}, {3, ctx}} {
		click = protowire.AppendTag(click, f.n, protowire.BytesType)
		click = protowire.AppendBytes(click, f.v)
	}
	return frame(id, append([]byte{0}, click...))
}

// What a user of Confluent's registry API meets that Apicurio does not
// show. Confluent's registry renders a Protobuf schema as .proto text by
// default, its references too, and the worker reads that text; a registry
// that returns the descriptor as stored (Apicurio, Redpanda) is read as
// well. The worker asks no format: each registry answers it differently
// (a 500 or mangled bytes from Apicurio 3.3.3, a 501 from Redpanda before
// 25.2), and this fake answers it as Redpanda does, so that asking would
// fail. A schema context is reached by its URL (/contexts/.team-a).
func TestConfluentRegistryAPI(t *testing.T) {
	fields := event.DefaultFields()
	fields.User = "json:ctx.user"
	m := contractMapping(t, fields)
	read := func(t *testing.T, s *Schemas, v []byte, user string) {
		t.Helper()
		if err := await(s, v, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		ev, err := (&event.Decoder{MaxBytes: 1 << 20, MaxClockSkew: time.Hour, Mapping: m, Values: s}).DecodeRecord(&event.Source{Value: v, Time: at})
		if err != nil || ev.User != user || ev.Tenant != "acme" {
			t.Fatalf("got %+v, %v; want acme's %s", ev, err, user)
		}
	}
	for _, tc := range []struct {
		name, prefix string
		stored       bool
		want         string // the requests, path?format
	}{
		{"text", "", false, "[/schemas/ids/7? /subjects/ctx.proto/versions/1? /schemas/ids/8? /subjects/ctx.proto/versions/1?]"},
		{"stored serialized", "", true, "[/schemas/ids/7? /subjects/ctx.proto/versions/1? /schemas/ids/8? /subjects/ctx.proto/versions/1?]"},
		{"context", "/contexts/.team-a", false, "[/contexts/.team-a/schemas/ids/7? /contexts/.team-a/subjects/ctx.proto/versions/1? /contexts/.team-a/schemas/ids/8? /contexts/.team-a/subjects/ctx.proto/versions/1?]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, url := newConfluent(t, tc.prefix, http.StatusNotImplemented, tc.stored)
			s, _ := open(t, Config{Format: "protobuf", URL: url}, m)
			read(t, s, protoClick(7, "e-1", "u-7"), "u-7")
			read(t, s, protoClick(8, "e-2", "u-8"), "u-8")
			c.mu.Lock()
			got := strings.Join(c.formats, " ")
			c.mu.Unlock()
			if "["+got+"]" != tc.want {
				t.Errorf("requests:\n  [%s]\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// Nor is a format asked of Avro schemas.
func TestAvroAsksNoFormat(t *testing.T) {
	f := newFake()
	url := f.serve(t)
	var asked []string
	f.allow = func(r *http.Request) bool {
		if q := r.URL.RawQuery; q != "" {
			asked = append(asked, q)
		}
		return true
	}
	f.add(1, sr.Schema{Schema: clickAvro})
	s, _ := open(t, Config{URL: url}, contractMapping(t, event.DefaultFields()))
	if err := await(s, click(t, 1, "u-1"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(asked) > 0 {
		t.Errorf("an Avro schema asked with %v", asked)
	}
}
