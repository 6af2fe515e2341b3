package event

import (
	"strconv"
	"time"
)

// ValueReader reads the mapped fields of a value that is not plain JSON:
// Avro, Protobuf or JSON Schema framed for a schema registry (package
// schema). The validation of what it found is the decoder's, the same for
// every format.
type ValueReader interface {
	// ReadValue reads m's fields (ValuePaths) of value. An *Error is the
	// value's fault and dead-letters it. Any other error is a fault outside
	// the value (the schema registry unreachable): the record must be
	// held and read again, never dead-lettered.
	ReadValue(value []byte, m *Mapping) (Found, error)
}

// Found holds the fields a ValueReader read of one value. The zero Found
// has none: a field never set is missing.
type Found struct{ f fields }

// ValuePath is a field a mapping reads from the value.
type ValuePath struct {
	// Field is the field's index, for Found's setters.
	Field int
	// Path is the field's path, by name: ["context", "user", "id"].
	Path []string
}

// ValuePaths are the fields m reads from the value ("json:PATH" sources;
// whatever the format, a path names fields by name).
func (m *Mapping) ValuePaths() []ValuePath {
	var ps []ValuePath
	for i := range m.src {
		if m.src[i].kind == fromJSON {
			ps = append(ps, ValuePath{Field: i, Path: m.src[i].path})
		}
	}
	return ps
}

// SetString sets field i to a string of typeName ("an Avro string"),
// which may share the value's memory.
func (fd *Found) SetString(i int, s, typeName string) {
	fd.f.f[i] = field{present: true, s: s, typeName: typeName}
}

// SetNull sets field i to null (an optional field without a value): as if
// it were absent.
func (fd *Found) SetNull(i int) {
	fd.f.f[i] = field{present: true, isNull: true}
}

// SetInt sets field i to an integer of typeName ("an Avro long"): an
// epoch time by the mapping's time format, a TTL in whole seconds.
func (fd *Found) SetInt(i int, n int64, typeName string) {
	fd.f.f[i] = field{present: true, kind: "number", typed: typedInt, num: n, typeName: typeName}
}

// SetFloat sets field i to a floating-point number of typeName, read as
// the shortest decimal that gives it back (what a JSON encoder writes).
func (fd *Found) SetFloat(i int, v float64, typeName string) {
	fd.f.f[i] = field{present: true, kind: "number", s: strconv.FormatFloat(v, 'f', -1, 64), typeName: typeName}
}

// SetTime sets field i to an instant of a timestamp type (Avro
// timestamp-millis, google.protobuf.Timestamp): an event time whatever
// the mapping's time format.
func (fd *Found) SetTime(i int, t time.Time, typeName string) {
	fd.f.f[i] = field{present: true, kind: "timestamp", typed: typedTime, num: t.Unix(), nsec: int32(t.Nanosecond()), typeName: typeName}
}

// SetOther sets field i to a value of a type no field takes (a record, an
// array, a bool...), named typeName in the reason.
func (fd *Found) SetOther(i int, typeName string) {
	fd.f.f[i] = field{present: true, kind: "other", typeName: typeName}
}

// SetInside says that field i cannot be read: its path goes through
// parent (a path as written, "context.user"), which is of typeName, not a
// record.
func (fd *Found) SetInside(i int, parent, typeName string) {
	fd.f.f[i] = field{present: true, kind: "other", parent: parent, typeName: typeName}
}

// ParseJSON reads m's fields of a JSON payload (JSON Schema's), by the
// rules of plain JSON values.
func (fd *Found) ParseJSON(payload []byte, m *Mapping) error {
	err := parse(payload, m.root, &fd.f)
	if err == errSyntax {
		return invalidJSON(payload)
	}
	return err
}
