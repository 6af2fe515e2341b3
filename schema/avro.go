package schema

import (
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"

	"github.com/cellttl/cellttl/event"
)

// aKind is an Avro type as the binary encoding sees it.
type aKind uint8

const (
	aNull aKind = iota
	aBool
	aInt
	aLong
	aFloat
	aDouble
	aBytes
	aString
	aRecord
	aEnum
	aArray
	aMap
	aUnion
	aFixed
)

var aKindNames = [...]string{aNull: "null", aBool: "boolean", aInt: "int", aLong: "long", aFloat: "float", aDouble: "double",
	aBytes: "bytes", aString: "string", aRecord: "record", aEnum: "enum", aArray: "array", aMap: "map", aUnion: "union", aFixed: "fixed"}

// aType is a node of a compiled Avro schema: enough to walk over a value
// of it, and to read the mapping's fields.
type aType struct {
	kind aKind
	// what names the type in reasons: "an Avro long".
	what string
	// millis or micros: a timestamp logical type, 1000 or 1 µs per unit.
	tsUnit int64
	// tsWhat names a timestamp type in reasons.
	tsWhat   string
	fields   []aField // record
	items    *aType   // array, map
	branches []*aType // union
	symbols  []string // enum
	size     int      // fixed
}

type aField struct {
	name string
	t    *aType
}

// compileAvro turns a parsed schema into aTypes; named types are compiled
// once, so a recursive schema makes a cyclic graph, not endless work.
func compileAvro(s avro.Schema, named map[string]*aType) (*aType, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		if t := named[n.FullName()]; t != nil {
			return t, nil
		}
	}
	t := &aType{}
	switch s := s.(type) {
	case *avro.NullSchema:
		t.kind = aNull
	case *avro.PrimitiveSchema:
		t.kind = primitiveKind(s.Type())
		if l := s.Logical(); l != nil && t.kind == aLong {
			switch l.Type() {
			case avro.TimestampMillis:
				t.tsUnit = 1000
			case avro.TimestampMicros:
				t.tsUnit = 1
			}
		}
	case *avro.RecordSchema:
		t.kind = aRecord
		named[s.FullName()] = t
		for _, f := range s.Fields() {
			ft, err := compileAvro(f.Type(), named)
			if err != nil {
				return nil, err
			}
			t.fields = append(t.fields, aField{name: f.Name(), t: ft})
		}
	case *avro.EnumSchema:
		t.kind, t.symbols = aEnum, s.Symbols()
		named[s.FullName()] = t
	case *avro.FixedSchema:
		t.kind, t.size = aFixed, s.Size()
		named[s.FullName()] = t
	case *avro.ArraySchema:
		t.kind = aArray
		it, err := compileAvro(s.Items(), named)
		if err != nil {
			return nil, err
		}
		t.items = it
	case *avro.MapSchema:
		t.kind = aMap
		it, err := compileAvro(s.Values(), named)
		if err != nil {
			return nil, err
		}
		t.items = it
	case *avro.UnionSchema:
		t.kind = aUnion
		for _, b := range s.Types() {
			bt, err := compileAvro(b, named)
			if err != nil {
				return nil, err
			}
			t.branches = append(t.branches, bt)
		}
	default:
		return nil, fmt.Errorf("unsupported Avro schema type %T", s)
	}
	t.what = "an Avro " + aKindNames[t.kind]
	t.tsWhat = t.what + " (timestamp)"
	return t, nil
}

func primitiveKind(t avro.Type) aKind {
	switch t {
	case avro.Boolean:
		return aBool
	case avro.Int:
		return aInt
	case avro.Long:
		return aLong
	case avro.Float:
		return aFloat
	case avro.Double:
		return aDouble
	case avro.Bytes:
		return aBytes
	case avro.String:
		return aString
	}
	return aNull
}

// aPlan is what to read at one record level of the mapping's paths: for
// each field position of the record, the mapped field read there, or the
// plan of a record below.
type aPlan struct {
	steps []aStep // by field position; a zero step reads nothing
}

type aStep struct {
	leaf  int // a mapped field's index, or -1
	child *aPlan
	// path is the path to here, as reasons name it ("context.user").
	path string
	// leaves are the mapped fields under a child, told when it is not a
	// record.
	leaves []int
}

// planAvro places the mapping's paths in the record t.
func planAvro(t *aType, paths []event.ValuePath) (*aPlan, error) {
	if t.kind != aRecord {
		return nil, fmt.Errorf("the schema is %s, not a record", t.what)
	}
	root := &aPlan{}
	for _, p := range paths {
		placeAvro(root, t, p.Path, 0, p.Field)
	}
	return root, nil
}

// placeAvro puts field at path[depth:] under plan, whose record is t (nil
// when the path goes through something that is not a record, found when
// a value is read). A path the schema does not have is left out: the
// field is then missing from every value, and said so.
func placeAvro(plan *aPlan, t *aType, path []string, depth, field int) {
	pos := -1
	for i, f := range t.fields {
		if f.name == path[depth] {
			pos = i
			break
		}
	}
	if pos < 0 {
		return
	}
	if plan.steps == nil {
		plan.steps = make([]aStep, len(t.fields))
		for i := range plan.steps {
			plan.steps[i].leaf = -1
		}
	}
	st := &plan.steps[pos]
	st.path = strings.Join(path[:depth+1], ".")
	if depth == len(path)-1 {
		st.leaf = field
		return
	}
	if st.child == nil {
		st.child = &aPlan{}
	}
	st.leaves = append(st.leaves, field)
	// The record below, through an optional (a union of null and one
	// record): the first record branch.
	below := t.fields[pos].t
	if below.kind == aUnion {
		for _, b := range below.branches {
			if b.kind == aRecord {
				below = b
				break
			}
		}
	}
	if below.kind == aRecord {
		placeAvro(st.child, below, path, depth+1, field)
	}
}
