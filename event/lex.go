package event

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

type parser struct {
	v []byte
	i int
	// seen has the bit of each parent key met, for duplicates.
	seen uint64
}

// alias returns v[start:end] as a string sharing its memory.
func (p *parser) alias(start, end int) string {
	if end == start {
		return ""
	}
	return unsafe.String(&p.v[start], end-start)
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
		// Most of an event's bytes are plain string contents: skip them
		// eight at a time, to the first byte that needs a look.
		for p.i+8 <= len(p.v) {
			if m := specials(binary.LittleEndian.Uint64(p.v[p.i:])); m != 0 {
				p.i += bits.TrailingZeros64(m) >> 3
				break
			}
			p.i += 8
		}
		for p.i < len(p.v) && !special(p.v[p.i]) {
			p.i++ // the last few bytes
		}
		if p.i == len(p.v) {
			break
		}
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
		default: // a control character
			return 0, 0, false, false
		}
	}
	return 0, 0, false, false
}

// special reports whether a string scan must look at c: a quote, a
// backslash or a control character.
func special(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

// specials marks the bytes of x (little-endian) for which special holds:
// the lowest set bit is in the first such byte. Each test is the classic
// "has a zero byte" bit trick: a byte below n borrows into its top bit
// only if it was below n, and a borrow only falsely marks bytes above a
// true one, so the first mark is exact. Bytes of 0x80 and above are never
// marked.
func specials(x uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (b-ones)&^b) & tops
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
