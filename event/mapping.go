package event

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The fields an event is made of, as indexes into a Mapping's sources.
const (
	fieldEventID = iota
	fieldTenant
	fieldUser
	fieldTime
	fieldTTL
	numFields
)

// MaxPathSegments bounds a JSON path: deeper paths are refused at start-up.
const MaxPathSegments = 8

// Fields says, as text, where each of an event's fields comes from (in
// the worker, the values of the flags that fill it).
//
// A source is "json:PATH", a JSON field of the value by name or dotted
// path (json:context.account.id), "header:NAME", a record header by its
// exact, case-sensitive name, or "key", the record key (not for the event
// time). The defaults are the contract's field names.
type Fields struct {
	Tenant, EventID, User, Time string
	// TTL, when set, is where an event may give its own TTL (json:PATH or
	// header:NAME); "" for none, every event keeping its tenant's.
	TTL string
	// TimeFormat is rfc3339, unix-ms, unix-s or auto.
	TimeFormat string
}

// DefaultFields is the contract: event_id, tenant_id, user_id and
// occurred_at at the top of the JSON value, the time in RFC 3339.
func DefaultFields() Fields {
	return Fields{Tenant: "json:tenant_id", EventID: "json:event_id", User: "json:user_id", Time: "json:occurred_at", TimeFormat: "rfc3339"}
}

// TimeFormat is how an event time is written.
type TimeFormat uint8

const (
	// RFC3339 is a string such as "2026-11-21T09:00:00.123Z".
	RFC3339 TimeFormat = iota
	// UnixMillis is a number of milliseconds since 1970, "ts": 1795297116069.
	UnixMillis
	// UnixSeconds is a number of seconds since 1970, with an optional
	// fraction: 1795297116.069.
	UnixSeconds
	// Auto takes a JSON string for RFC 3339 (or a decimal number written as
	// a string), a number for epoch seconds when its integer part is below
	// 10^11 and milliseconds otherwise: 10^11 seconds is the year 5138, and
	// 10^11 milliseconds March 1973, so only milliseconds before then are
	// misread.
	Auto
)

var timeFormats = map[string]TimeFormat{"rfc3339": RFC3339, "unix-ms": UnixMillis, "unix-s": UnixSeconds, "auto": Auto}

func (f TimeFormat) String() string {
	for name, v := range timeFormats {
		if v == f {
			return name
		}
	}
	return fmt.Sprintf("TimeFormat(%d)", uint8(f))
}

type sourceKind uint8

const (
	fromJSON sourceKind = iota
	fromHeader
	fromKey
	// fromNowhere is a field the mapping does not read (an unset TTL).
	fromNowhere
)

// source is where one field is read from.
type source struct {
	kind sourceKind
	// spec is the source as configured ("json:context.account.id").
	spec string
	// name is how reasons name the field: the path as written for JSON
	// ("tenant_id", as the contract always has), "header X-Tenant",
	// "record key".
	name string
	// field is the value of a dead letter's cellttl.field header: the path
	// for JSON, the spec otherwise.
	field string
	path  []string // JSON
	// header is the index of the header in Source.Headers.
	header int
}

// Labels name the members of Fields in errors, as the program that fills
// them calls them (the worker: by its flags). An empty label names the
// member itself: Tenant, EventID, User, Time, TTL, TimeFormat.
type Labels struct {
	Tenant, EventID, User, Time, TTL, TimeFormat string
}

// of returns the labels of each source, and of the time format.
func (l Labels) of() (sources [numFields]string, timeFormat string) {
	sources = [numFields]string{fieldEventID: cmp.Or(l.EventID, "EventID"), fieldTenant: cmp.Or(l.Tenant, "Tenant"),
		fieldUser: cmp.Or(l.User, "User"), fieldTime: cmp.Or(l.Time, "Time"), fieldTTL: cmp.Or(l.TTL, "TTL")}
	return sources, cmp.Or(l.TimeFormat, "TimeFormat")
}

// Mapping is a compiled Fields, ready for decoding. It is read-only and
// may be shared by any number of goroutines.
type Mapping struct {
	src     [numFields]source
	format  TimeFormat
	root    *node
	headers []string
	// formatLabel names the time format in the errors of events.
	formatLabel string
}

// contract is the mapping of DefaultFields, the one a Decoder without a
// Mapping uses.
var contract = func() *Mapping {
	m, err := DefaultFields().Compile(Labels{})
	if err != nil {
		panic(err)
	}
	return m
}()

// Compile checks the sources as strictly as tenants.yaml is checked and
// builds the mapping; errors name the member by its label and quote the
// value.
func (f Fields) Compile(labels Labels) (*Mapping, error) {
	labelOf, formatLabel := labels.of()
	m := &Mapping{formatLabel: formatLabel}
	var errs []error
	specs := [numFields]string{fieldEventID: f.EventID, fieldTenant: f.Tenant, fieldUser: f.User, fieldTime: f.Time, fieldTTL: f.TTL}
	for i, spec := range specs {
		if i == fieldTTL && spec == "" {
			m.src[i] = source{kind: fromNowhere}
			continue
		}
		s, err := parseSource(spec, i == fieldTime || i == fieldTTL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", labelOf[i], spec, err))
			continue
		}
		if s.kind == fromHeader {
			s.header = len(m.headers)
			m.headers = append(m.headers, s.spec[len("header:"):])
		}
		m.src[i] = s
	}
	format, ok := timeFormats[f.TimeFormat]
	if !ok {
		errs = append(errs, fmt.Errorf("%s %q: want rfc3339, unix-ms, unix-s or auto", formatLabel, f.TimeFormat))
	}
	m.format = format
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Two fields from one place, or a field inside another, is a mistake
	// that would make rows out of the wrong values.
	for i := range numFields {
		for j := i + 1; j < numFields; j++ {
			a, b := m.src[i], m.src[j]
			if a.kind != b.kind || a.kind == fromNowhere {
				continue
			}
			switch {
			case a.kind == fromKey || a.spec == b.spec:
				errs = append(errs, fmt.Errorf("%s and %s both read %s", labelOf[i], labelOf[j], a.spec))
			case a.kind == fromJSON && (isPrefix(a.path, b.path) || isPrefix(b.path, a.path)):
				errs = append(errs, fmt.Errorf("%s %s and %s %s: one path lies inside the other, so one of them would be an object", labelOf[i], a.spec, labelOf[j], b.spec))
			case a.kind == fromJSON && foldedApart(a.path, b.path):
				errs = append(errs, fmt.Errorf("%s %s and %s %s: the paths differ only in case, which readers that ignore case take for one key given twice", labelOf[i], a.spec, labelOf[j], b.spec))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m.root = m.tree()
	return m, nil
}

// parseSource reads one field's source; timeLike fields (the event time and
// the TTL) cannot come from the record key, which is an id.
func parseSource(spec string, timeLike bool) (source, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	switch kind {
	case "json":
		if rest == "" {
			return source{}, errors.New("json: needs a field name or a dotted path")
		}
		path := strings.Split(rest, ".")
		if len(path) > MaxPathSegments {
			return source{}, fmt.Errorf("the path has %d segments, more than %d", len(path), MaxPathSegments)
		}
		for _, seg := range path {
			if seg == "" {
				return source{}, errors.New("the path has an empty segment (keys with dots cannot be addressed)")
			}
			if !utf8.ValidString(seg) {
				return source{}, errors.New("the path is not valid UTF-8")
			}
			if strings.ContainsRune(seg, utf8.RuneError) {
				// Readers turn any invalid byte of a key into U+FFFD: such a
				// key would match many.
				return source{}, errors.New("the path holds U+FFFD, which readers make of any invalid byte")
			}
		}
		return source{kind: fromJSON, spec: spec, name: rest, field: rest, path: path}, nil
	case "header":
		if rest == "" {
			return source{}, errors.New("header: needs a header name")
		}
		if strings.HasPrefix(rest, "cellttl.") {
			// cellttl's own headers: dead letters carry them, and worker
			// redrive leaves them out of the record it decides again.
			return source{}, errors.New("headers named cellttl.* are cellttl's own (dead letters carry them)")
		}
		return source{kind: fromHeader, spec: spec, name: "header " + rest, field: spec}, nil
	case "key":
		if rest != "" || strings.Contains(spec, ":") {
			return source{}, errors.New(`the record key is "key", with nothing after it`)
		}
		if timeLike {
			return source{}, errors.New("it cannot come from the record key: use json:PATH or header:NAME")
		}
		return source{kind: fromKey, spec: spec, name: "record key", field: spec}, nil
	}
	return source{}, errors.New("want json:PATH, header:NAME or key")
}

// foldedApart reports whether a and b first differ in segments equal
// under case folding.
func foldedApart(a, b []string) bool {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return strings.EqualFold(a[i], b[i])
		}
	}
	return false
}

func isPrefix(p, of []string) bool {
	if len(p) > len(of) {
		return false
	}
	for i := range p {
		if p[i] != of[i] {
			return false
		}
	}
	return true
}

// Headers are the names of the record headers the mapping reads, in the
// order Source.Headers holds their values.
func (m *Mapping) Headers() []string { return m.headers }

// node is one JSON object level of the mapping's paths: the keys read
// there, each a field or the parent of deeper ones.
type node struct {
	keys []nodeKey
	// A key in another case that folds to one of keys is ambiguous. Most
	// keys are ruled out by length and first byte before any folding.
	minLen, maxLen int
	first          [256]bool
}

type nodeKey struct {
	name  string
	path  string // from the root, as reasons name it
	field int    // the field read here, -1 for a parent
	child *node
	// seen is this parent's bit in parser.seen, for duplicates.
	seen uint64
}

func (m *Mapping) tree() *node {
	root := &node{}
	parents := 0
	for i, s := range m.src {
		if s.kind != fromJSON {
			continue
		}
		n := root
		for depth, seg := range s.path {
			leaf := depth == len(s.path)-1
			k := n.find(seg)
			if k == nil {
				n.keys = append(n.keys, nodeKey{name: seg, path: strings.Join(s.path[:depth+1], "."), field: -1})
				k = &n.keys[len(n.keys)-1]
				n.index(seg)
				if leaf {
					k.field = i
				} else {
					k.child = &node{}
					k.seen = 1 << parents
					parents++
				}
			}
			n = k.child
		}
	}
	return root
}

func (n *node) find(name string) *nodeKey {
	for i := range n.keys {
		if n.keys[i].name == name {
			return &n.keys[i]
		}
	}
	return nil
}

// index prepares the quick rejection of keys that cannot fold to name:
// each character of name folds from 1 to 4 bytes of UTF-8 (encoding/json
// folds like strings.EqualFold; Deseret's cases are 4 bytes each), and the
// first byte must begin a character
// of the first character's fold orbit.
func (n *node) index(name string) {
	runes := utf8.RuneCountInString(name)
	if n.minLen == 0 || runes < n.minLen {
		n.minLen = runes
	}
	n.maxLen = max(n.maxLen, utf8.UTFMax*runes)
	r, _ := utf8.DecodeRuneInString(name)
	for f := r; ; {
		var b [utf8.UTFMax]byte
		utf8.EncodeRune(b[:], f)
		n.first[b[0]] = true
		if f = unicode.SimpleFold(f); f == r {
			break
		}
	}
}

// foldsTo returns the key that key stands for in the eyes of a reader that
// matches keys regardless of case, when key is not exactly that key.
func (n *node) foldsTo(key string) *nodeKey {
	// An empty key folds to nothing, and a node of no keys (a mapping that
	// reads nothing from JSON) has minLen 0.
	if key == "" || len(key) < n.minLen || len(key) > n.maxLen || !n.first[key[0]] {
		return nil
	}
	for i := range n.keys {
		if strings.EqualFold(key, n.keys[i].name) {
			return &n.keys[i]
		}
	}
	return nil
}

// leaves calls fn with each field read under n.
func (n *node) leaves(fn func(field int)) {
	for _, k := range n.keys {
		if k.child != nil {
			k.child.leaves(fn)
		} else {
			fn(k.field)
		}
	}
}

// TenantField names the tenant's field the way an Error's Field does.
func (m *Mapping) TenantField() string {
	if m == nil {
		m = contract
	}
	return m.src[fieldTenant].field
}

// TimeField names the event time's field the way an Error's Field does.
func (m *Mapping) TimeField() string {
	if m == nil {
		m = contract
	}
	return m.src[fieldTime].field
}
