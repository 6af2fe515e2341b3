package schema

import (
	"context"
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cellttl/cellttl/event"
)

// Source is a schema as the registry gives it, with the schemas it
// references, each before those that reference it.
type Source struct {
	Type sr.SchemaType
	Text string
	// Refs are the referenced schemas, dependencies first: by the name the
	// schema refers to them (an Avro full name, a .proto import path).
	Refs []Ref
}

// Ref is a referenced schema.
type Ref struct {
	Name, Text string
}

// Compiled is a schema compiled for one mapping: it reads the mapping's
// fields of the values written with it. It is read-only and may be shared
// by any number of goroutines.
type Compiled struct {
	format  Format
	mapping *event.Mapping
	// Avro: the writer's schema and where the fields are in it.
	avroType *aType
	avroPlan *aPlan
	// Protobuf: the plan of each message a value may name, the first
	// (index [0]) apart.
	protoFirst *pPlan
	protoPlans map[messageIndex]*pPlan
	// protoMessages are the messages themselves, by index: what JSON
	// decodes a whole value into.
	protoMessages map[messageIndex]protoreflect.MessageDescriptor
}

// Compile compiles src for format, to read m's fields. An error is the
// schema's fault: values written with it cannot be read (invalid_schema).
// A nil m reads no fields: the Compiled then serves JSON alone (a reader of
// the stored values, which needs no mapping).
func Compile(ctx context.Context, format Format, src Source, m *event.Mapping) (*Compiled, error) {
	if src.Type != format.registryType() {
		return nil, fmt.Errorf("it is a %s schema, and --value-format is %s", src.Type, format)
	}
	c := &Compiled{format: format, mapping: m}
	var paths []event.ValuePath
	if m != nil {
		paths = m.ValuePaths()
	}
	switch format {
	case Avro:
		cache := &avro.SchemaCache{}
		for _, r := range src.Refs {
			if _, err := avro.ParseWithCache(r.Text, "", cache); err != nil {
				return nil, fmt.Errorf("referenced schema %s: %w", r.Name, err)
			}
		}
		s, err := avro.ParseWithCache(src.Text, "", cache)
		if err != nil {
			return nil, err
		}
		if c.avroType, err = compileAvro(s, map[string]*aType{}); err != nil {
			return nil, err
		}
		if c.avroPlan, err = planAvro(c.avroType, paths); err != nil {
			return nil, err
		}
	case Protobuf:
		imports := map[string]string{}
		for _, r := range src.Refs {
			imports[r.Name] = r.Text
		}
		fd, err := compileProto(ctx, src.Text, imports)
		if err != nil {
			return nil, err
		}
		if fd.Messages().Len() == 0 {
			return nil, fmt.Errorf("the schema declares no message")
		}
		c.protoPlans = map[messageIndex]*pPlan{}
		c.protoMessages = map[messageIndex]protoreflect.MessageDescriptor{}
		planMessages(fd.Messages(), messageIndex{}, paths, c.protoPlans, c.protoMessages)
		c.protoFirst = c.protoPlans[messageIndex{depth: 1}]
	case JSONSchema:
		// The value is JSON after its framing, read as plain JSON is: the
		// producer's serializer validated it against the schema, which
		// the worker needs for nothing else (DESIGN.md, beside this file).
	default:
		return nil, fmt.Errorf("--value-format %s reads no schema", format)
	}
	return c, nil
}

// planMessages plans each message of msgs and of the messages nested in
// them, by their index, and keeps each message by its index in mds.
func planMessages(msgs protoreflect.MessageDescriptors, at messageIndex, paths []event.ValuePath, plans map[messageIndex]*pPlan, mds map[messageIndex]protoreflect.MessageDescriptor) {
	if at.depth == maxIndexDepth {
		return
	}
	for i := range msgs.Len() {
		idx := at
		idx.path[idx.depth] = int32(i)
		idx.depth++
		plans[idx] = planProto(msgs.Get(i), paths)
		mds[idx] = msgs.Get(i)
		planMessages(msgs.Get(i).Messages(), idx, paths, plans, mds)
	}
}

// Read reads the fields of a value written with c; payload is what follows
// the schema id (SchemaID).
func (c *Compiled) Read(payload []byte) (event.Found, error) {
	switch c.format {
	case Avro:
		return readAvro(c.avroType, c.avroPlan, payload)
	case Protobuf:
		framed := payload
		idx, payload, err := parseMessageIndex(payload)
		if err != nil {
			return event.Found{}, apicurioOr(framed, err)
		}
		plan := c.protoFirst
		if idx.depth != 1 || idx.path[0] != 0 {
			if plan = c.protoPlans[idx]; plan == nil {
				return event.Found{}, apicurioOr(framed, noMessage(idx))
			}
		}
		r := pReader{}
		if err := r.message(plan, payload, 0); err != nil {
			return event.Found{}, err
		}
		return r.fd, nil
	}
	var fd event.Found
	err := fd.ParseJSON(payload, c.mapping)
	return fd, err
}

// noMessage refuses an index the schema has no message for (apart, so
// that the index stays off the heap on the way there).
func noMessage(idx messageIndex) error {
	path := append([]int32(nil), idx.path[:idx.depth]...)
	return &event.Error{Class: event.BadSchema, Reason: fmt.Sprintf("the value names message %v, which its schema does not have", path)}
}
