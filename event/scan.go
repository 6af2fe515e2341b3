package event

import (
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// fields are the raw values of the fields the worker reads. Strings alias
// the value's bytes: decoding allocates nothing for ordinary events.
type fields struct {
	eventID, tenantID, userID, occurredAt field
	// err is the first reason the object, though valid JSON, is ambiguous:
	// a field given twice, or a key that other readers take for a field.
	err *Error
}

type field struct {
	present bool
	isNull  bool
	s       string
	kind    string // JSON kind when not a string: "number", "object", ...
	// escape is set when the string holds an escape that decodes to no
	// character (a lone UTF-16 surrogate): other readers replace it with
	// U+FFFD, so two different values would read the same.
	escape string
}

// maxDepth is encoding/json's limit on containers open at once; a deeper
// value is invalid for it, so it is invalid here too.
const maxDepth = 10000

// names are the fields read, as they appear in the contract.
var names = [...]string{"event_id", "tenant_id", "user_id", "occurred_at"}

// caseVariant returns the field a key stands for in the eyes of a reader
// that matches keys regardless of case (encoding/json does, with Unicode
// folding: "ſ" is an "s"), when the key is not exactly that field's name.
func caseVariant(key string) string {
	// Each of the names' letters folds from at most 3 bytes of UTF-8, and
	// their first letters (e, t, u, o) only from their ASCII capitals.
	if len(key) < len("user_id") || len(key) > 3*len("occurred_at") {
		return ""
	}
	switch key[0] | 0x20 {
	case 'e', 't', 'u', 'o':
	default:
		return ""
	}
	for _, name := range names {
		if strings.EqualFold(key, name) {
			return name
		}
	}
	return ""
}

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
		key, _ := p.text(ks, ke, esc)
		switch key {
		case "event_id":
			dst = &f.eventID
		case "tenant_id":
			dst = &f.tenantID
		case "user_id":
			dst = &f.userID
		case "occurred_at":
			dst = &f.occurredAt
		default:
			if name := caseVariant(key); name != "" && f.err == nil {
				f.err = &Error{Field: name, Reason: fmt.Sprintf("key %q differs from %s only in case, and readers that ignore case take it for %s", key, name, name)}
			}
		}
		if dst != nil && dst.present && f.err == nil {
			f.err = &Error{Field: key, Reason: key + " appears more than once, and readers disagree on which to take"}
		}
		start := p.i
		if dst != nil && p.peek() == '"' {
			vs, ve, vesc, ok := p.str()
			if !ok {
				return f, errSyntax
			}
			*dst = field{present: true}
			var clean bool
			if dst.s, clean = p.text(vs, ve, vesc); !clean {
				dst.escape = string(v[vs-1 : ve+1])
			}
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
			if f.err != nil {
				return f, f.err
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

// value validates any JSON value at p.i, inside depth open containers.
func (p *parser) value(depth int) bool {
	switch p.peek() {
	case '"':
		_, _, _, ok := p.str()
		return ok
	case '{':
		if depth++; depth > maxDepth {
			return false
		}
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
			if !p.value(depth) {
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
		if depth++; depth > maxDepth {
			return false
		}
		p.i++
		p.space()
		if p.peek() == ']' {
			p.i++
			return true
		}
		for {
			p.space()
			if !p.value(depth) {
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
// decoded when it holds escapes (rare in ids and times). clean is false
// when an escape decodes to a lone surrogate.
func (p *parser) text(start, end int, escaped bool) (s string, clean bool) {
	if !escaped {
		if end == start {
			return "", true
		}
		return unsafe.String(&p.v[start], end-start), true
	}
	return unescape(p.v[start:end])
}

// unescape decodes the contents of a validated JSON string. Unlike
// encoding/json it never substitutes U+FFFD: an escaped surrogate without
// its pair makes clean false, and raw bytes are kept as they are, so that
// the caller's UTF-8 check sees them.
func unescape(s []byte) (string, bool) {
	b := make([]byte, 0, len(s))
	clean := true
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch e := s[i+1]; e {
		case 'u':
			r := hexRune(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r2 := hexRune(s[i+2 : i+6]); r2 >= 0xdc00 && r2 < 0xe000 {
						b = utf8.AppendRune(b, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				clean = false
				b = utf8.AppendRune(b, utf8.RuneError)
				continue
			}
			b = utf8.AppendRune(b, r)
		default:
			b = append(b, unescaped[e])
			i += 2
		}
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), clean
}

// unescaped maps the letter of a one-character escape to its byte.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
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
