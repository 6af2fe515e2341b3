package event

import (
	"fmt"
)

// fields are the raw values of the fields a mapping reads from JSON.
// Strings alias the value's bytes: decoding allocates nothing for ordinary
// events.
type fields struct {
	f [numFields]field
	// err is the first reason the object, though valid JSON, is ambiguous:
	// a field given twice, or a key that other readers take for a field.
	err *Error
}

type field struct {
	present bool
	isNull  bool
	// typed says that num holds the value: typedInt, an integer of a
	// schema's type; typedTime, a timestamp type, num seconds and nsec
	// nanoseconds since 1970 (beside the bools: no room taken).
	typed uint8
	nsec  int32
	// s is a string's contents, or a number's text.
	s    string
	kind string // JSON kind when not a string: "number", "object", ...
	// escape is set when the string holds an escape that decodes to no
	// character (a lone UTF-16 surrogate): other readers replace it with
	// U+FFFD, so two different values would read the same.
	escape string
	// parent is set when the field cannot be there: the path's object at
	// parent is a JSON kind, not an object.
	parent string
	// typeName, set by a ValueReader (a value that is not JSON), names the
	// value's type in reasons: "an Avro long", "a Protobuf bool".
	typeName string
	num      int64
}

const (
	typedNone uint8 = iota
	typedInt
	typedTime
)

// what names the field's type in reasons: "a JSON number", "an Avro long".
func (f *field) what() string {
	if f.typeName != "" {
		return f.typeName
	}
	if f.kind == "" {
		return "a JSON string"
	}
	return "a JSON " + f.kind
}

// maxDepth is encoding/json's limit on containers open at once; a deeper
// value is invalid for it, so it is invalid here too.
const maxDepth = 10000

// errSyntax marks a value that is not JSON; the caller asks encoding/json
// for the details, on that rare path only.
var errSyntax = &Error{Class: NotJSON, Reason: "not a JSON object: invalid JSON"}

// parse validates value as JSON (the grammar json.Valid accepts) and, when
// it is an object, reads the fields of root's paths into f, in one pass. A value
// that is valid JSON but no object yields an *Error saying what it is.
func parse(v []byte, root *node, f *fields) error {
	p := parser{v: v}
	p.space()
	if p.i >= len(v) {
		return errSyntax
	}
	if v[p.i] != '{' {
		kind := kindOf(v, p.i)
		if !p.value(0) || !p.atEnd() {
			return errSyntax
		}
		return &Error{Class: NotJSON, Reason: fmt.Sprintf("value is a JSON %s, not an object", kind)}
	}
	p.i++
	if !p.members(root, f, 1) || !p.atEnd() {
		return errSyntax
	}
	if f.err != nil {
		return f.err
	}
	return nil
}

// members reads an object's members, after its "{", through its "}",
// taking n's keys into f. depth counts the containers open, this one too.
func (p *parser) members(n *node, f *fields, depth int) bool {
	p.space()
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		ks, ke, esc, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.space()
		key, _ := p.text(ks, ke, esc)
		k := n.find(key)
		if k == nil && f.err == nil {
			if like := n.foldsTo(key); like != nil {
				f.err = &Error{Class: Ambiguous, Field: like.path, Reason: fmt.Sprintf("key %q differs from %s only in case, and readers that ignore case take it for %s", key, like.path, like.path)}
			}
		}
		switch {
		case k == nil:
			if !p.value(depth) {
				return false
			}
		case k.child != nil:
			if !p.parent(k, f, depth) {
				return false
			}
		default:
			if !p.leaf(&f.f[k.field], k, f, depth) {
				return false
			}
		}
		p.space()
		switch p.peek() {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			return true
		}
		return false
	}
}

// leaf reads the value of a field's key into dst.
func (p *parser) leaf(dst *field, k *nodeKey, f *fields, depth int) bool {
	if dst.present && f.err == nil {
		f.err = &Error{Class: Ambiguous, Field: k.path, Reason: k.path + " appears more than once, and readers disagree on which to take"}
	}
	start := p.i
	if p.peek() == '"' {
		vs, ve, vesc, ok := p.str()
		if !ok {
			return false
		}
		*dst = field{present: true}
		var clean bool
		if dst.s, clean = p.text(vs, ve, vesc); !clean {
			dst.escape = string(p.v[vs-1 : ve+1])
		}
		return true
	}
	if !p.value(depth) {
		return false
	}
	*dst = field{present: true, isNull: p.v[start] == 'n', kind: kindOf(p.v, start)}
	switch dst.kind {
	case "null":
		dst.kind = ""
	case "number":
		dst.s = p.alias(start, p.i)
	}
	return true
}

// parent reads the value of a key the mapping's paths go through: an
// object is read for the deeper keys; anything else but null leaves those
// fields present in a place they cannot be.
func (p *parser) parent(k *nodeKey, f *fields, depth int) bool {
	if p.seen&k.seen != 0 && f.err == nil {
		f.err = &Error{Class: Ambiguous, Field: k.path, Reason: k.path + " appears more than once, and readers disagree on which to take"}
	}
	p.seen |= k.seen
	if p.peek() == '{' {
		if depth+1 > maxDepth {
			return false
		}
		p.i++
		return p.members(k.child, f, depth+1)
	}
	start := p.i
	if !p.value(depth) {
		return false
	}
	if p.v[start] != 'n' {
		kind := kindOf(p.v, start)
		k.child.leaves(func(i int) { f.f[i] = field{present: true, kind: kind, parent: k.path} })
	}
	return true
}
