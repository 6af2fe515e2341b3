package schema

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/cellttl/cellttl/event"
)

// aReader walks one Avro value.
type aReader struct {
	b   []byte
	i   int
	fd  event.Found
	err string
	// budget bounds the items walked, so that an array of a billion nulls
	// in a few bytes is refused rather than counted through.
	budget int
}

// readAvro reads a value of the record t, reading plan's fields into fd;
// the whole value must decode, with no byte left over.
//
// The fields are kept in the reader, returned by value: a pointer handed
// down the recursive walk would put them on the heap.
func readAvro(t *aType, plan *aPlan, payload []byte) (event.Found, error) {
	r := aReader{b: payload, budget: 8*len(payload) + 1024}
	r.record(t, plan, 0)
	if r.err == "" && r.i != len(r.b) {
		r.err = fmt.Sprintf("%d bytes are left after the record", len(r.b)-r.i)
	}
	if r.err != "" {
		return event.Found{}, undecodable(r.err)
	}
	return r.fd, nil
}

// maxAvroDepth bounds nesting (a recursive schema lets a value nest as
// deep as its bytes allow).
const maxAvroDepth = 256

func (r *aReader) fail(why string) {
	if r.err == "" {
		r.err = why
	}
}

func (r *aReader) long() int64 {
	v, n := binary.Varint(r.b[r.i:])
	if n <= 0 {
		r.fail("a varint is cut short or too long")
		return 0
	}
	r.i += n
	return v
}

// length reads a length and checks that many bytes follow.
func (r *aReader) length() int {
	n := r.long()
	if r.err != "" {
		return 0
	}
	if n < 0 || n > int64(len(r.b)-r.i) {
		r.fail(fmt.Sprintf("a length of %d bytes where %d are left", n, len(r.b)-r.i))
		return 0
	}
	return int(n)
}

func (r *aReader) record(t *aType, plan *aPlan, depth int) {
	if depth > maxAvroDepth {
		r.fail("records nest too deep")
		return
	}
	for i := range t.fields {
		if r.err != "" {
			return
		}
		ft := t.fields[i].t
		if plan == nil || plan.steps == nil || (plan.steps[i].leaf < 0 && plan.steps[i].child == nil) {
			r.skip(ft, depth+1)
			continue
		}
		st := &plan.steps[i]
		if st.leaf >= 0 {
			r.leaf(ft, st.leaf, depth+1)
		} else {
			r.parent(ft, st, depth+1)
		}
	}
}

// parent reads a value the mapping's paths go through: a record is read
// for the fields below; null leaves them absent; anything else makes them
// unreadable.
func (r *aReader) parent(t *aType, st *aStep, depth int) {
	if t.kind == aUnion {
		t = r.branch(t)
		if r.err != "" {
			return
		}
	}
	switch t.kind {
	case aRecord:
		r.record(t, st.child, depth)
		return
	case aNull:
		return
	}
	r.skip(t, depth)
	for _, f := range st.leaves {
		r.fd.SetInside(f, st.path, t.what)
	}
}

func (r *aReader) branch(t *aType) *aType {
	k := r.long()
	if r.err != "" {
		return t
	}
	if k < 0 || k >= int64(len(t.branches)) {
		r.fail(fmt.Sprintf("union branch %d of %d", k, len(t.branches)))
		return t
	}
	return t.branches[k]
}

// leaf reads a mapped field's value.
func (r *aReader) leaf(t *aType, field, depth int) {
	if t.kind == aUnion {
		t = r.branch(t)
		if r.err != "" {
			return
		}
	}
	switch t.kind {
	case aNull:
		r.fd.SetNull(field)
	case aString:
		n := r.length()
		if r.err == "" {
			r.fd.SetString(field, alias(r.b[r.i:r.i+n]), t.what)
			r.i += n
		}
	case aEnum:
		// An enum is read as its symbol's name, as Avro's JSON encoding
		// writes it.
		k := r.long()
		if r.err == "" && (k < 0 || k >= int64(len(t.symbols))) {
			r.fail(fmt.Sprintf("enum symbol %d of %d", k, len(t.symbols)))
		}
		if r.err == "" {
			r.fd.SetString(field, t.symbols[k], t.what)
		}
	case aInt, aLong:
		v := r.long()
		if r.err != "" {
			return
		}
		if t.tsUnit != 0 {
			r.fd.SetTime(field, timeOf(v, t.tsUnit), t.tsWhat)
			return
		}
		r.fd.SetInt(field, v, t.what)
	case aFloat, aDouble:
		if t.kind == aFloat {
			if len(r.b)-r.i < 4 {
				r.fail("a float is cut short")
				return
			}
			r.fd.SetFloat(field, float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b[r.i:]))), t.what)
			r.i += 4
			return
		}
		if len(r.b)-r.i < 8 {
			r.fail("a double is cut short")
			return
		}
		r.fd.SetFloat(field, math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.i:])), t.what)
		r.i += 8
	default:
		r.skip(t, depth)
		r.fd.SetOther(field, t.what)
	}
}

// timeOf is v units of unit microseconds since 1970.
func timeOf(v, unit int64) time.Time {
	if unit == 1000 {
		return time.UnixMilli(v)
	}
	return time.UnixMicro(v)
}

// skip walks over a value of t.
func (r *aReader) skip(t *aType, depth int) {
	if r.err != "" {
		return
	}
	if r.budget--; r.budget < 0 {
		r.fail("the value holds more items than its bytes can")
		return
	}
	switch t.kind {
	case aNull:
	case aBool:
		if r.i >= len(r.b) {
			r.fail("a boolean is cut short")
			return
		}
		r.i++
	case aInt, aLong, aEnum:
		r.long()
	case aFloat, aDouble:
		n := 4
		if t.kind == aDouble {
			n = 8
		}
		if len(r.b)-r.i < n {
			r.fail("a " + aKindNames[t.kind] + " is cut short")
			return
		}
		r.i += n
	case aBytes, aString:
		r.i += r.length()
	case aFixed:
		if len(r.b)-r.i < t.size {
			r.fail("a fixed is cut short")
			return
		}
		r.i += t.size
	case aRecord:
		r.record(t, nil, depth)
	case aUnion:
		r.skip(r.branch(t), depth)
	case aArray, aMap:
		r.blocks(t, depth)
	}
}

// blocks walks over an array's or a map's blocks: a count (negative when
// the block's byte size follows), the items, until a count of 0.
func (r *aReader) blocks(t *aType, depth int) {
	if depth > maxAvroDepth {
		r.fail("values nest too deep")
		return
	}
	for r.err == "" {
		n := r.long()
		if r.err != "" || n == 0 {
			return
		}
		if n < 0 {
			if n == math.MinInt64 {
				r.fail("a block count out of range")
				return
			}
			n = -n
			r.long() // the block's size in bytes: walked item by item instead, to check them
		}
		if n > int64(r.budget) {
			r.fail("the value holds more items than its bytes can")
			return
		}
		for ; n > 0 && r.err == ""; n-- {
			if t.kind == aMap {
				r.i += r.length()
			}
			r.skip(t.items, depth+1)
		}
	}
}

// alias returns b as a string sharing its memory: values never change
// while their events are in use.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
