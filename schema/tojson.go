package schema

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// JSON decodes a whole value written with c into a JSON object: payload
// is what follows the schema id (SchemaID). It is for people reading the
// stored values (worker read), not for the worker's path, which reads only
// the mapping's fields (Read).
//
//   - Avro: a record is an object of its fields in the schema's order; a
//     union is the value of its branch, bare (not Avro JSON's {"type": v});
//     timestamp-millis and timestamp-micros are RFC 3339 times in UTC;
//     bytes and fixed are base64; an enum is its symbol; a float that is
//     not a number is "NaN", "Infinity" or "-Infinity".
//   - Protobuf: the message the value's message index names, in
//     Protobuf's JSON mapping (protojson) with the .proto's field names.
//   - JSON Schema: the JSON after the framing, compacted.
//
// An error is an *event.Error: undecodable, or invalid_schema for a
// Protobuf message index the schema does not have.
func (c *Compiled) JSON(payload []byte) (json.RawMessage, error) {
	switch c.format {
	case Avro:
		r := &aJSON{aReader: aReader{b: payload, budget: 8*len(payload) + 1024}}
		r.enc = json.NewEncoder(&r.out)
		r.enc.SetEscapeHTML(false) // a URL's & stays as written
		r.value(c.avroType, 0)
		if r.err == "" && r.i != len(r.b) {
			r.err = fmt.Sprintf("%d bytes are left after the record", len(r.b)-r.i)
		}
		if r.err != "" {
			return nil, undecodable(r.err)
		}
		return r.out.Bytes(), nil
	case Protobuf:
		framed := payload
		idx, payload, err := parseMessageIndex(payload)
		if err != nil {
			return nil, apicurioOr(framed, err)
		}
		md := c.protoMessages[idx]
		if md == nil {
			return nil, apicurioOr(framed, noMessage(idx))
		}
		msg := dynamicpb.NewMessage(md)
		if err := (proto.UnmarshalOptions{RecursionLimit: maxProtoDepth}).Unmarshal(payload, msg); err != nil {
			return nil, undecodable(err.Error())
		}
		out, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
		if err != nil {
			return nil, undecodable(err.Error())
		}
		return compact(out)
	}
	return compact(payload)
}

// compact returns the JSON doc without insignificant space (protojson
// varies its spacing on purpose), or undecodable when doc is no JSON.
func compact(doc []byte) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return nil, undecodable("it is not JSON after its framing: " + err.Error())
	}
	return b.Bytes(), nil
}

// aJSON writes an Avro value as JSON while walking it, under the bounds of
// aReader (depth, items, no byte read past the value).
type aJSON struct {
	aReader
	out bytes.Buffer
	enc *json.Encoder // of strings, into out
}

func (r *aJSON) value(t *aType, depth int) {
	if r.err != "" {
		return
	}
	if depth > maxAvroDepth {
		r.fail("values nest too deep")
		return
	}
	if r.budget--; r.budget < 0 {
		r.fail("the value holds more items than its bytes can")
		return
	}
	switch t.kind {
	case aNull:
		r.out.WriteString("null")
	case aBool:
		if r.i >= len(r.b) || r.b[r.i] > 1 {
			r.fail("a boolean is cut short or not 0 or 1")
			return
		}
		r.out.WriteString(strconv.FormatBool(r.b[r.i] == 1))
		r.i++
	case aInt, aLong:
		v := r.long()
		if r.err != "" {
			return
		}
		if t.tsUnit != 0 {
			r.str(timeOf(v, t.tsUnit).UTC().Format(time.RFC3339Nano))
			return
		}
		r.out.WriteString(strconv.FormatInt(v, 10))
	case aFloat, aDouble:
		r.float(t.kind)
	case aBytes:
		n := r.length()
		if r.err == "" {
			r.str(base64.StdEncoding.EncodeToString(r.b[r.i : r.i+n]))
			r.i += n
		}
	case aFixed:
		if len(r.b)-r.i < t.size {
			r.fail("a fixed is cut short")
			return
		}
		r.str(base64.StdEncoding.EncodeToString(r.b[r.i : r.i+t.size]))
		r.i += t.size
	case aString:
		n := r.length()
		if r.err == "" {
			if !utf8.Valid(r.b[r.i : r.i+n]) {
				r.fail("a string is not UTF-8")
				return
			}
			r.str(alias(r.b[r.i : r.i+n]))
			r.i += n
		}
	case aEnum:
		k := r.long()
		if r.err == "" && (k < 0 || k >= int64(len(t.symbols))) {
			r.fail(fmt.Sprintf("enum symbol %d of %d", k, len(t.symbols)))
		}
		if r.err == "" {
			r.str(t.symbols[k])
		}
	case aRecord:
		r.out.WriteByte('{')
		for i, f := range t.fields {
			if i > 0 {
				r.out.WriteByte(',')
			}
			r.str(f.name)
			r.out.WriteByte(':')
			r.value(f.t, depth+1)
		}
		r.out.WriteByte('}')
	case aUnion:
		b := r.branch(t)
		if r.err == "" {
			r.value(b, depth)
		}
	case aArray, aMap:
		r.items(t, depth)
	}
}

// items writes an array's or a map's blocks (see aReader.blocks).
func (r *aJSON) items(t *aType, depth int) {
	open, end := byte('['), byte(']')
	if t.kind == aMap {
		open, end = '{', '}'
	}
	r.out.WriteByte(open)
	first := true
	for r.err == "" {
		n := r.long()
		if r.err != "" || n == 0 {
			break
		}
		if n < 0 {
			if n == math.MinInt64 {
				r.fail("a block count out of range")
				return
			}
			n = -n
			r.long() // the block's size in bytes
		}
		if n > int64(r.budget) {
			r.fail("the value holds more items than its bytes can")
			return
		}
		for ; n > 0 && r.err == ""; n-- {
			if !first {
				r.out.WriteByte(',')
			}
			first = false
			if t.kind == aMap {
				k := r.length()
				if r.err != "" {
					return
				}
				r.str(string(r.b[r.i : r.i+k]))
				r.i += k
				r.out.WriteByte(':')
			}
			r.value(t.items, depth+1)
		}
	}
	r.out.WriteByte(end)
}

func (r *aJSON) float(k aKind) {
	var v float64
	if k == aFloat {
		if len(r.b)-r.i < 4 {
			r.fail("a float is cut short")
			return
		}
		v = float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.i:])))
		r.i += 4
	} else {
		if len(r.b)-r.i < 8 {
			r.fail("a double is cut short")
			return
		}
		v = math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:]))
		r.i += 8
	}
	switch {
	case math.IsNaN(v):
		r.str("NaN")
	case math.IsInf(v, 1):
		r.str("Infinity")
	case math.IsInf(v, -1):
		r.str("-Infinity")
	default:
		bits := 64
		if k == aFloat {
			bits = 32
		}
		r.out.WriteString(strconv.FormatFloat(v, 'g', -1, bits))
	}
}

// str writes s as a JSON string.
func (r *aJSON) str(s string) {
	_ = r.enc.Encode(s)             // a string always encodes, into a bytes.Buffer always written
	r.out.Truncate(r.out.Len() - 1) // the newline Encode ends with
}
