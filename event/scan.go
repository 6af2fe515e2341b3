package event

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// fields are the raw values of the fields the worker reads. Strings alias
// the value's bytes: decoding allocates nothing for ordinary events.
type fields struct {
	eventID, tenantID, userID, occurredAt field
}

type field struct {
	present bool
	isNull  bool
	s       string
	kind    string // JSON kind when not a string: "number", "object", ...
}

// maxDepth bounds nesting as encoding/json does.
const maxDepth = 10000

// errSyntax marks a value that is not JSON; the caller asks encoding/json
// for the details, on that rare path only.
var errSyntax = &Error{Reason: "not a JSON object: invalid JSON"}

// parse validates value as JSON (the grammar json.Valid accepts) and, when
// it is an object, reads its top-level fields, in one pass. A value that is
// valid JSON but no object yields an *Error saying what it is.
func parse(v []byte) (fields, error) {
	p := parser{v: v}
	var f fields
	p.space()
	if p.i >= len(v) {
		return f, errSyntax
	}
	if v[p.i] != '{' {
		kind := kindOf(v, p.i)
		if !p.value(0) || !p.atEnd() {
			return f, errSyntax
		}
		return f, &Error{Reason: fmt.Sprintf("value is a JSON %s, not an object", kind)}
	}
	p.i++
	p.space()
	if p.peek() == '}' {
		p.i++
		if !p.atEnd() {
			return f, errSyntax
		}
		return f, nil
	}
	for {
		p.space()
		ks, ke, esc, ok := p.str()
		if !ok {
			return f, errSyntax
		}
		p.space()
		if p.peek() != ':' {
			return f, errSyntax
		}
		p.i++
		p.space()
		var dst *field
		switch key := p.text(ks, ke, esc); key {
		case "event_id":
			dst = &f.eventID
		case "tenant_id":
			dst = &f.tenantID
		case "user_id":
			dst = &f.userID
		case "occurred_at":
			dst = &f.occurredAt
		}
		start := p.i
		if dst != nil && p.peek() == '"' {
			vs, ve, vesc, ok := p.str()
			if !ok {
				return f, errSyntax
			}
			*dst = field{present: true, s: p.text(vs, ve, vesc)}
		} else {
			if !p.value(1) {
				return f, errSyntax
			}
			if dst != nil {
				*dst = field{present: true, isNull: v[start] == 'n', kind: kindOf(v, start)}
				if dst.isNull {
					dst.kind = ""
				}
			}
		}
		p.space()
		switch p.peek() {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			if !p.atEnd() {
				return f, errSyntax
			}
			return f, nil
		}
		return f, errSyntax
	}
}

type parser struct {
	v []byte
	i int
}

func (p *parser) peek() byte {
	if p.i < len(p.v) {
		return p.v[p.i]
	}
	return 0
}

func (p *parser) space() {
	for p.i < len(p.v) {
		switch p.v[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) atEnd() bool {
	p.space()
	return p.i == len(p.v)
}

// value validates any JSON value at p.i.
func (p *parser) value(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch p.peek() {
	case '"':
		_, _, _, ok := p.str()
		return ok
	case '{':
		p.i++
		p.space()
		if p.peek() == '}' {
			p.i++
			return true
		}
		for {
			p.space()
			if _, _, _, ok := p.str(); !ok {
				return false
			}
			p.space()
			if p.peek() != ':' {
				return false
			}
			p.i++
			p.space()
			if !p.value(depth + 1) {
				return false
			}
			p.space()
			switch p.peek() {
			case ',':
				p.i++
			case '}':
				p.i++
				return true
			default:
				return false
			}
		}
	case '[':
		p.i++
		p.space()
		if p.peek() == ']' {
			p.i++
			return true
		}
		for {
			p.space()
			if !p.value(depth + 1) {
				return false
			}
			p.space()
			switch p.peek() {
			case ',':
				p.i++
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	}
	return p.number()
}

func (p *parser) literal(s string) bool {
	if len(p.v)-p.i < len(s) || string(p.v[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() bool {
	if p.peek() == '-' {
		p.i++
	}
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	default:
		return false
	}
	if p.peek() == '.' {
		p.i++
		if !p.digits() {
			return false
		}
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

func (p *parser) digits() bool {
	start := p.i
	for p.i < len(p.v) && p.v[p.i] >= '0' && p.v[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// str validates the string at p.i and returns the bounds of its contents
// and whether it holds escapes.
func (p *parser) str() (start, end int, escaped, ok bool) {
	if p.peek() != '"' {
		return 0, 0, false, false
	}
	p.i++
	start = p.i
	for p.i < len(p.v) {
		c := p.v[p.i]
		switch {
		case c == '"':
			end = p.i
			p.i++
			return start, end, escaped, true
		case c == '\\':
			escaped = true
			p.i++
			switch p.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.v)-p.i < 5 || !hex4(p.v[p.i+1:p.i+5]) {
					return 0, 0, false, false
				}
				p.i += 5
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		default:
			p.i++
		}
	}
	return 0, 0, false, false
}

func hex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// text returns the string's contents: an alias of the value's bytes, or
// decoded by encoding/json when it holds escapes (rare in ids and times).
func (p *parser) text(start, end int, escaped bool) string {
	if !escaped {
		if end == start {
			return ""
		}
		return unsafe.String(&p.v[start], end-start)
	}
	var s string
	_ = json.Unmarshal(p.v[start-1:end+1], &s) // already validated
	return s
}

func kindOf(v []byte, i int) string {
	if i >= len(v) {
		return "nothing"
	}
	switch v[i] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}
