// Package schema reads event values framed for a Confluent-compatible
// schema registry: Avro, Protobuf and JSON Schema. It parses the framing
// (magic byte 0, a 4-byte big-endian schema id, for Protobuf the message
// indexes), compiles a registry's schema once into a reader of the
// mapping's fields, and reads those fields of each value without decoding
// the rest into objects: the skipped parts are only walked over, and
// strings alias the value's bytes. It does no I/O: the registry client,
// its cache and its retries are schema/registry's.
package schema

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/internal/bounded"
)

// Format is how values are written: the worker's --value-format.
type Format uint8

const (
	// JSON is plain JSON, the contract's: no framing, no registry.
	JSON Format = iota
	Avro
	Protobuf
	JSONSchema
)

var formatNames = [...]string{JSON: "json", Avro: "avro", Protobuf: "protobuf", JSONSchema: "json-schema"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat reads a --value-format.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if n == s {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("want json, avro, protobuf or json-schema")
}

// registryType is the schemaType a registry gives schemas of the format.
func (f Format) registryType() sr.SchemaType {
	switch f {
	case Protobuf:
		return sr.TypeProtobuf
	case JSONSchema:
		return sr.TypeJSON
	}
	return sr.TypeAvro
}

// header is the framing's parser: franz-go's, which allocates nothing for
// the id (its DecodeIndex allocates twice per call: messageIndex is ours).
var header sr.ConfluentHeader

// SchemaID returns the schema id of a framed value and what follows it,
// or a not_framed *event.Error.
func SchemaID(value []byte) (uint32, []byte, error) {
	id, rest, err := header.DecodeID(value)
	if err != nil {
		return 0, nil, notFramed(value)
	}
	return uint32(id), rest, nil
}

func notFramed(value []byte) error {
	why := "it is shorter than the 5 bytes of the framing"
	if len(value) >= 5 {
		why = fmt.Sprintf("its first byte is 0x%02x, not the magic byte 0", value[0])
	}
	return &event.Error{Class: event.NotFramed, Reason: "the value has no schema-registry framing (magic byte 0, a 4-byte schema id): " + why}
}

// maxIndexDepth bounds a Protobuf message index: a message nested deeper
// than this is refused (schemas that deep are not written by hand).
const maxIndexDepth = 16

// messageIndex is the path of a Protobuf message in its file: top-level
// message index[0], its nested message index[1], ...
type messageIndex struct {
	path  [maxIndexDepth]int32
	depth int
}

// parseMessageIndex reads the Protobuf framing's message indexes after the
// schema id: a zigzag varint count, then that many zigzag varints; a
// count of 0 stands for the first message ([0]).
func parseMessageIndex(b []byte) (messageIndex, []byte, error) {
	var idx messageIndex
	n, w := binary.Varint(b)
	if w <= 0 {
		return idx, nil, undecodable("the Protobuf message index is cut short")
	}
	b = b[w:]
	if n == 0 {
		idx.depth = 1
		return idx, b, nil
	}
	if n < 0 || n > maxIndexDepth {
		return idx, nil, undecodable(fmt.Sprintf("the Protobuf message index has %d entries, want 1..%d", n, maxIndexDepth))
	}
	for i := range int(n) {
		v, w := binary.Varint(b)
		if w <= 0 || v < 0 || v > 1<<20 {
			return idx, nil, undecodable("the Protobuf message index is not a list of message numbers")
		}
		idx.path[i] = int32(v)
		b = b[w:]
	}
	idx.depth = int(n)
	return idx, b, nil
}

// apicurioOr is err, unless b (what follows the schema id) starts as
// Apicurio's own Protobuf serializer frames a value: a length-delimited
// message naming the value's message (field 1, its simple name) where
// Confluent's framing has message indexes. Read as indexes, its length is
// a count, and the refusal said nothing a producer could act on. It is not
// read as a name: the same bytes may be valid indexes of another schema,
// so the worker cannot tell the two framings apart by the bytes alone.
func apicurioOr(b []byte, err error) error {
	l, w := binary.Uvarint(b)
	if w <= 0 || l < 3 || uint64(len(b)-w) < l || b[w] != 0x0a {
		return err
	}
	ref := b[w : w+int(l)]
	n, nw := binary.Uvarint(ref[1:])
	if nw <= 0 || n == 0 || uint64(len(ref)-1-nw) != n {
		return err
	}
	name := ref[1+nw:]
	for _, c := range name {
		if !(c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return err
		}
	}
	var e *event.Error
	if !errors.As(err, &e) {
		return err
	}
	return &event.Error{Class: e.Class, Reason: fmt.Sprintf("%s; the value names its message %q where Confluent's framing has message indexes, "+
		"as Apicurio's own Protobuf serializer writes it: produce with a serializer that writes Confluent's framing "+
		"(Confluent's KafkaProtobufSerializer, or confluent-kafka's ProtobufSerializer)", e.Reason, bounded.Text(string(name), 128))}
}

func undecodable(why string) error {
	return &event.Error{Class: event.Undecodable, Reason: "the value does not decode with its schema: " + why}
}
