package event

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// fields are the raw values of the fields the worker reads, found by
// scanning the top level of the JSON object without building it. Strings
// alias the value's bytes: decoding allocates nothing for ordinary events.
type fields struct {
	eventID, tenantID, userID, occurredAt field
}

type field struct {
	present bool
	isNull  bool
	s       string
	kind    string // JSON kind when not a string: "number", "object", ...
}

// scanObject reads the top-level fields of a value already known to be
// valid JSON.
func scanObject(v []byte) (fields, error) {
	var f fields
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return f, &Error{Reason: fmt.Sprintf("value is a JSON %s, not an object", kindOf(v, i))}
	}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == '}' {
		return f, nil
	}
	for i < len(v) {
		key, next, err := readString(v, i)
		if err != nil {
			return f, err
		}
		i = skipSpace(v, next)
		i = skipSpace(v, i+1) // ':'
		var dst *field
		switch key {
		case "event_id":
			dst = &f.eventID
		case "tenant_id":
			dst = &f.tenantID
		case "user_id":
			dst = &f.userID
		case "occurred_at":
			dst = &f.occurredAt
		}
		end := skipValue(v, i)
		if dst != nil {
			*dst = field{present: true}
			switch v[i] {
			case '"':
				s, _, err := readString(v, i)
				if err != nil {
					return f, err
				}
				dst.s = s
			case 'n':
				dst.isNull = true
			default:
				dst.kind = kindOf(v, i)
			}
		}
		i = skipSpace(v, end)
		if i < len(v) && v[i] == '}' {
			break
		}
		i = skipSpace(v, i+1) // ','
	}
	return f, nil
}

// readString returns the string starting at v[i] == '"' and the index after
// its closing quote. Without escapes the string aliases v.
func readString(v []byte, i int) (string, int, error) {
	start := i + 1
	escaped := false
	for j := start; j < len(v); j++ {
		switch v[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			if !escaped {
				if j == start {
					return "", j + 1, nil
				}
				return unsafe.String(&v[start], j-start), j + 1, nil
			}
			// Escapes are rare in ids and times: let encoding/json decode them.
			var s string
			if err := json.Unmarshal(v[i:j+1], &s); err != nil {
				return "", 0, &Error{Reason: fmt.Sprintf("bad JSON string: %v", err)}
			}
			return s, j + 1, nil
		}
	}
	return "", 0, &Error{Reason: "not a JSON object: unterminated string"}
}

// skipValue returns the index after the JSON value starting at v[i].
func skipValue(v []byte, i int) int {
	depth := 0
	for j := i; j < len(v); j++ {
		switch c := v[j]; c {
		case '"':
			_, next, err := readStringEnd(v, j)
			if err != nil {
				return len(v)
			}
			j = next - 1
			if depth == 0 {
				return next
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				if depth < 0 { // the end of the enclosing object
					return j
				}
				return j + 1
			}
		case ',':
			if depth == 0 {
				return j
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 && j > i {
				return j
			}
		}
	}
	return len(v)
}

// readStringEnd finds the end of the string at v[i] without decoding it.
func readStringEnd(v []byte, i int) (int, int, error) {
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '\\':
			j++
		case '"':
			return i, j + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("unterminated string")
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
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
