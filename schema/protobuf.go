package schema

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/cellttl/cellttl/event"
)

// compileProto compiles a Protobuf schema, with the schemas it imports by
// name (the registry's references), into its file descriptor. protocompile
// is the compiler buf uses: pure Go, no protoc.
//
// Each schema comes as a registry returns it: .proto text, or the base64
// of a FileDescriptorProto, which Confluent's serializers register and
// registries other than Confluent's return as stored (Confluent's own
// converts it to text unless asked for ?format=serialized). The two mix:
// a binary schema may import a text one, and the reverse.
func compileProto(ctx context.Context, text string, imports map[string]string) (protoreflect.FileDescriptor, error) {
	const main = "cellttl-schema.proto"
	srcs := map[string]string{main: text}
	for name, src := range imports {
		srcs[name] = src
	}
	resolve := protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
		src, ok := srcs[path]
		if !ok {
			return protocompile.SearchResult{}, fmt.Errorf("import %q: %w", path, protoregistry.NotFound)
		}
		return protoSource(path, src)
	})
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(resolve), MaxParallelism: 1}
	files, err := c.Compile(ctx, main)
	if err != nil {
		if _, binary := descriptorBytes(text); binary {
			return nil, fmt.Errorf("the schema (a base64 FileDescriptorProto): %w", err)
		}
		return nil, err
	}
	return files[0], nil
}

// maxDescriptorDepth bounds how deep a binary schema's messages nest, as
// the registry bounds a text schema's braces (64 levels) before any
// compiler reads it: a FileDescriptorProto's own framing adds a few.
const maxDescriptorDepth = 64 + 8

// protoSource is the compiler's input for the schema text of path: its
// source, or the FileDescriptorProto it is the base64 of.
func protoSource(path, text string) (protocompile.SearchResult, error) {
	b, binary := descriptorBytes(text)
	if !binary {
		return protocompile.SearchResult{Source: strings.NewReader(text)}, nil
	}
	fdp := &descriptorpb.FileDescriptorProto{}
	if err := (proto.UnmarshalOptions{RecursionLimit: maxDescriptorDepth}).Unmarshal(b, fdp); err != nil {
		return protocompile.SearchResult{}, fmt.Errorf("%s: base64 that is no FileDescriptorProto: %w", path, err)
	}
	// The compiler knows a file by the path it was asked for; the name the
	// producer's file had is its own.
	fdp.Name = proto.String(path)
	for _, m := range fdp.MessageType {
		defaultJSONNames(m)
	}
	return protocompile.SearchResult{Proto: fdp}, nil
}

// defaultJSONNames gives each field of m (and of the messages nested in
// it) without a json_name the one protoc would. protoc always writes it;
// a descriptor built by hand (as Python's descriptor_pb2 makes it easy to)
// leaves it out, and the compiler then takes every such field's JSON name
// for the empty one, and refuses the schema for two fields sharing it.
func defaultJSONNames(m *descriptorpb.DescriptorProto) {
	for _, f := range append(m.Field, m.Extension...) {
		if f.JsonName == nil {
			f.JsonName = proto.String(jsonName(f.GetName()))
		}
	}
	for _, n := range m.NestedType {
		defaultJSONNames(n)
	}
}

// jsonName is protoc's JSON name of a field: each underscore dropped and
// the letter after it upper-cased.
func jsonName(name string) string {
	var b strings.Builder
	upper := false
	for _, r := range name {
		switch {
		case r == '_':
			upper = true
		case upper && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			upper = false
		default:
			b.WriteRune(r)
			upper = false
		}
	}
	return b.String()
}

// descriptorBytes reports whether text is base64 (standard alphabet,
// padded, as Confluent's serializers write it), and its bytes. .proto
// text never is: it has spaces, semicolons or quotes, which base64 has not.
func descriptorBytes(text string) ([]byte, bool) {
	t := strings.TrimSpace(text)
	if t == "" {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(t)
	return b, err == nil
}

// pPlan is what to read of one message of the mapping's paths: the step
// of each field number read.
type pPlan struct {
	steps map[protowire.Number]*pStep
	// dense holds the steps of the numbers below len(dense), the common
	// case, without a map lookup.
	dense []*pStep
}

type pStep struct {
	fd    protoreflect.FieldDescriptor
	leaf  int // a mapped field's index, or -1
	child *pPlan
	path  string
	// leaves are the mapped fields under a child, told when it is not a
	// message.
	leaves []int
	what   string
}

func (p *pPlan) step(n protowire.Number) *pStep {
	if int(n) < len(p.dense) {
		return p.dense[n]
	}
	return p.steps[n]
}

// planProto places the mapping's paths in md; a path md does not have is
// left out (the field is missing from every value, and said so).
func planProto(md protoreflect.MessageDescriptor, paths []event.ValuePath) *pPlan {
	root := &pPlan{}
	for _, p := range paths {
		placeProto(root, md, p.Path, 0, p.Field)
	}
	return root
}

func placeProto(plan *pPlan, md protoreflect.MessageDescriptor, path []string, depth, field int) {
	fd := md.Fields().ByName(protoreflect.Name(path[depth]))
	if fd == nil {
		return
	}
	st := plan.step(fd.Number())
	if st == nil {
		st = &pStep{fd: fd, leaf: -1, what: protoWhat(fd)}
		for i := range path[:depth+1] {
			if i > 0 {
				st.path += "."
			}
			st.path += path[i]
		}
		if plan.steps == nil {
			plan.steps = map[protowire.Number]*pStep{}
		}
		plan.steps[fd.Number()] = st
		if n := int(fd.Number()); n < 64 {
			if n >= len(plan.dense) {
				plan.dense = append(plan.dense, make([]*pStep, n+1-len(plan.dense))...)
			}
			plan.dense[n] = st
		}
	}
	if depth == len(path)-1 {
		st.leaf = field
		return
	}
	if st.child == nil {
		st.child = &pPlan{}
	}
	st.leaves = append(st.leaves, field)
	if fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() {
		placeProto(st.child, fd.Message(), path, depth+1, field)
	}
}

// protoWhat names a field's type in reasons: "a Protobuf int64".
func protoWhat(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return "a Protobuf map"
	case fd.IsList():
		return "a Protobuf repeated " + fd.Kind().String()
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		return "a Protobuf message " + string(fd.Message().FullName())
	}
	return "a Protobuf " + fd.Kind().String()
}

// maxProtoDepth bounds the nesting of messages read.
const maxProtoDepth = 100

// message reads a message of plan's fields into r.fd. Fields the plan does
// not read are walked over by their wire type, as any reader does with
// unknown fields; a wire type other than the field's declared one makes
// the field unknown too, as Protobuf's own readers take it. A scalar given
// twice takes the last, as Protobuf's readers do.
//
// The fields are kept in the reader (see readAvro).
type pReader struct{ fd event.Found }

func (r *pReader) message(plan *pPlan, b []byte, depth int) error {
	if depth > maxProtoDepth {
		return undecodable("messages nest too deep")
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return undecodable(fmt.Sprintf("a field tag: %v", protowire.ParseError(n)))
		}
		b = b[n:]
		st := plan.step(num)
		if st == nil || typ != wireType(st.fd) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return undecodable(fmt.Sprintf("field %d: %v", num, protowire.ParseError(n)))
			}
			b = b[n:]
			continue
		}
		var err error
		if n, err = r.field(st, typ, b, depth); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// wireType is the wire type of a field's values (a packed repeated field
// is length-delimited: read as a whole, it is never a mapped value).
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	if fd.IsList() && fd.IsPacked() {
		return protowire.BytesType
	}
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// field reads one field the plan reads and returns its length.
func (r *pReader) field(st *pStep, typ protowire.Type, b []byte, depth int) (int, error) {
	fd := &r.fd
	n := protowire.ConsumeFieldValue(st.fd.Number(), typ, b)
	if n < 0 {
		return 0, undecodable(fmt.Sprintf("field %s: %v", st.path, protowire.ParseError(n)))
	}
	f := st.fd
	if st.leaf < 0 {
		// A field the paths go through: a message is read for the fields
		// below (each occurrence, so that they merge as Protobuf's do).
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() {
			v, _ := protowire.ConsumeBytes(b)
			return n, r.message(st.child, v, depth+1)
		}
		for _, l := range st.leaves {
			fd.SetInside(l, st.path, st.what)
		}
		return n, nil
	}
	if f.IsList() || f.IsMap() {
		fd.SetOther(st.leaf, st.what)
		return n, nil
	}
	i := st.leaf
	switch f.Kind() {
	case protoreflect.StringKind:
		v, _ := protowire.ConsumeBytes(b)
		fd.SetString(i, alias(v), st.what)
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind:
		v, _ := protowire.ConsumeVarint(b)
		if f.Kind() == protoreflect.Int32Kind {
			v = uint64(int64(int32(v)))
		} else if f.Kind() == protoreflect.Uint32Kind {
			v = uint64(uint32(v))
		}
		fd.SetInt(i, int64(v), st.what)
	case protoreflect.Uint64Kind:
		v, _ := protowire.ConsumeVarint(b)
		if v > math.MaxInt64 {
			fd.SetFloat(i, float64(v), st.what)
		} else {
			fd.SetInt(i, int64(v), st.what)
		}
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		v, _ := protowire.ConsumeVarint(b)
		fd.SetInt(i, protowire.DecodeZigZag(v), st.what)
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		v, _ := protowire.ConsumeFixed32(b)
		if f.Kind() == protoreflect.Sfixed32Kind {
			fd.SetInt(i, int64(int32(v)), st.what)
		} else {
			fd.SetInt(i, int64(v), st.what)
		}
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		v, _ := protowire.ConsumeFixed64(b)
		fd.SetInt(i, int64(v), st.what)
	case protoreflect.FloatKind:
		v, _ := protowire.ConsumeFixed32(b)
		fd.SetFloat(i, float64(math.Float32frombits(v)), st.what)
	case protoreflect.DoubleKind:
		v, _ := protowire.ConsumeFixed64(b)
		fd.SetFloat(i, math.Float64frombits(v), st.what)
	case protoreflect.EnumKind:
		// An enum is read as its value's name, as Protobuf's JSON writes it.
		v, _ := protowire.ConsumeVarint(b)
		if ev := f.Enum().Values().ByNumber(protoreflect.EnumNumber(int32(v))); ev != nil {
			fd.SetString(i, string(ev.Name()), st.what)
		} else {
			fd.SetInt(i, int64(int32(v)), st.what)
		}
	case protoreflect.MessageKind:
		v, _ := protowire.ConsumeBytes(b)
		return n, readWellKnown(st, v, fd)
	default:
		fd.SetOther(i, st.what)
	}
	return n, nil
}

// readWellKnown reads a message-typed mapped field: a
// google.protobuf.Timestamp is an event time, a google.protobuf.StringValue
// a string (an optional one, in proto3's old way); any other message is
// no field's type.
func readWellKnown(st *pStep, v []byte, fd *event.Found) error {
	switch st.fd.Message().FullName() {
	case "google.protobuf.Timestamp":
		var secs int64
		var nanos int32
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 || typ != protowire.VarintType {
				return undecodable(st.path + " is not a google.protobuf.Timestamp")
			}
			x, m := protowire.ConsumeVarint(v[n:])
			if m < 0 {
				return undecodable(st.path + " is not a google.protobuf.Timestamp")
			}
			switch num {
			case 1:
				secs = int64(x)
			case 2:
				nanos = int32(x)
			}
			v = v[n+m:]
		}
		if nanos < 0 || nanos >= 1e9 {
			return &event.Error{Class: event.BadTime, Field: st.path, Reason: fmt.Sprintf("%s has %d nanoseconds, outside 0..999999999", st.path, nanos)}
		}
		// Seconds past what time.Unix holds wrap, and a year near 2^63
		// seconds read as one before 1970: skipped as expired, silently.
		// google.protobuf.Timestamp itself allows 0001 to 9999.
		if secs < minTimestamp || secs > maxTimestamp {
			return &event.Error{Class: event.BadTime, Field: st.path, Reason: fmt.Sprintf("%s has %d seconds, outside 0001-01-01 to 9999-12-31", st.path, secs)}
		}
		fd.SetTime(st.leaf, time.Unix(secs, int64(nanos)), "a google.protobuf.Timestamp")
	case "google.protobuf.StringValue":
		var s string
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 {
				return undecodable(st.path + " is not a google.protobuf.StringValue")
			}
			m := protowire.ConsumeFieldValue(num, typ, v[n:])
			if m < 0 {
				return undecodable(st.path + " is not a google.protobuf.StringValue")
			}
			if num == 1 && typ == protowire.BytesType {
				b, _ := protowire.ConsumeBytes(v[n:])
				s = alias(b)
			}
			v = v[n+m:]
		}
		fd.SetString(st.leaf, s, "a google.protobuf.StringValue")
	default:
		fd.SetOther(st.leaf, st.what)
	}
	return nil
}

// The seconds a google.protobuf.Timestamp may hold: 0001-01-01T00:00:00Z
// to 9999-12-31T23:59:59Z, as its definition says.
const (
	minTimestamp = -62135596800
	maxTimestamp = 253402300799
)
