package event

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/duration"
)

func ttlDecoder(t testing.TB, from string) Decoder {
	f := DefaultFields()
	f.TTL = from
	return Decoder{MaxBytes: 1 << 10, Mapping: mapping(t, f)}
}

// An event's own TTL is read from a JSON field or a header, as a duration
// of tenants.yaml's grammar or a whole number of seconds; absent or null
// keeps the tenant's.
func TestEventTTL(t *testing.T) {
	const head = `{"event_id":"e-1","tenant_id":"acme","occurred_at":"2026-11-21T09:00:00Z"`
	d := ttlDecoder(t, "json:ttl")
	tests := []struct {
		field string
		want  time.Duration
		has   bool
	}{
		{``, 0, false},
		{`,"ttl":null`, 0, false},
		{`,"ttl":"90m"`, 90 * time.Minute, true},
		{`,"ttl":"2d"`, 48 * time.Hour, true},
		{`,"ttl":"1d12h"`, 36 * time.Hour, true},
		{`,"ttl":"1.5h"`, 90 * time.Minute, true},
		{`,"ttl":"1500ms"`, 1500 * time.Millisecond, true},
		{`,"ttl":3600`, time.Hour, true},
		{`,"ttl":"3600"`, time.Hour, true},
		{`,"ttl":0`, 0, false}, // no TTL of its own, as Cassandra's 0
		{`,"ttl":"0s"`, 0, false},
		{`,"ttl":3600.0`, time.Hour, true},
		{`,"ttl":"+1h"`, time.Hour, true},
		{`,"ttl":"1ms999us"`, time.Millisecond, true}, // cut to the millisecond, never lengthened
		{`,"ttl":"500us"`, 0, true},                   // asked for less than a millisecond: lives none
		{`,"ttl":"\u0039\u0030m"`, 90 * time.Minute, true},
		// Too long for a Duration: the longest, which max_ttl clamps.
		{`,"ttl":99999999999999999999999`, MaxRequestedTTL, true},
		{`,"ttl":"300000000d"`, MaxRequestedTTL, true},
	}
	for _, tt := range tests {
		ev, err := d.DecodeRecord(&Source{Value: []byte(head + tt.field + `}`), Time: recordTime})
		if err != nil || ev.TTL != tt.want || ev.HasTTL != tt.has {
			t.Errorf("%s: TTL %v (set %v), %v; want %v (set %v)", tt.field, ev.TTL, ev.HasTTL, err, tt.want, tt.has)
		}
	}

	h := ttlDecoder(t, "header:x-ttl")
	rec := Source{Value: []byte(head + `}`), Time: recordTime}
	rec.Headers[0] = Header{Value: []byte("7d"), Count: 1}
	if ev, err := h.DecodeRecord(&rec); err != nil || ev.TTL != 7*duration.Day || !ev.HasTTL {
		t.Errorf("header 7d: %v (set %v), %v", ev.TTL, ev.HasTTL, err)
	}
	rec.Headers[0] = Header{}
	if ev, err := h.DecodeRecord(&rec); err != nil || ev.HasTTL {
		t.Errorf("no header: %v (set %v), %v", ev.TTL, ev.HasTTL, err)
	}
}

// A TTL that cannot be read dead-letters the event with a reason that
// names the field and quotes the value; the event's ids and time come back
// with the error.
func TestEventTTLInvalid(t *testing.T) {
	const head = `{"event_id":"e-1","tenant_id":"acme","user_id":"u-1","occurred_at":"2026-11-21T09:00:00Z"`
	d := ttlDecoder(t, "json:meta.ttl")
	tests := []struct {
		field string
		class Class
		want  string
	}{
		{`,"meta":{"ttl":"soon"}`, BadTTL, `meta.ttl "soon" is not a TTL`},
		{`,"meta":{"ttl":""}`, BadTTL, `meta.ttl "" is empty`},
		{`,"meta":{"ttl":"-1h"}`, BadTTL, `meta.ttl "-1h" is negative`},
		{`,"meta":{"ttl":"1h30"}`, BadTTL, `meta.ttl "1h30" is not a TTL`},
		{`,"meta":{"ttl":"1.5"}`, BadTTL, `meta.ttl "1.5" is not a TTL`},
		{`,"meta":{"ttl":3600.5}`, BadTTL, `meta.ttl 3600.5 is not a whole number of seconds`},
		{`,"meta":{"ttl":-60}`, BadTTL, `meta.ttl -60 is not a whole number of seconds`},
		{`,"meta":{"ttl":1e3}`, BadTTL, `meta.ttl 1e3 is not a whole number of seconds`},
		{`,"meta":{"ttl":true}`, WrongType, `meta.ttl must be a duration string such as "90m" or a whole number of seconds, not a JSON bool`},
		{`,"meta":{"ttl":{"h":1}}`, WrongType, `not a JSON object`},
		{`,"meta":"x"`, WrongType, `meta.ttl cannot be read: meta is a JSON string, not an object`},
		{`,"meta":{"ttl":"1h","ttl":"2h"}`, Ambiguous, `meta.ttl appears more than once`},
		{`,"meta":{"ttl":"1h","TTL":"2h"}`, Ambiguous, `meta.ttl`},
		{`,"meta":{"ttl":"1h\ud800"}`, Ambiguous, `escapes a lone UTF-16 surrogate`},
		{`,"meta":{"ttl":" 1h"}`, BadTTL, `meta.ttl " 1h" is not a TTL`},
		{`,"meta":{"ttl":"` + strings.Repeat("9", 200) + `x"}`, BadTTL, `…" is not a TTL`},
	}
	for _, tt := range tests {
		ev, err := d.DecodeRecord(&Source{Value: []byte(head + tt.field + `}`), Time: recordTime})
		var e *Error
		if !errors.As(err, &e) || e.Class != tt.class || !strings.Contains(e.Reason, tt.want) || e.Field != "meta.ttl" {
			t.Errorf("%s: %v, want %s %q on meta.ttl", tt.field, err, tt.class, tt.want)
			continue
		}
		if len(e.Reason) > 200 {
			t.Errorf("%s: a reason of %d bytes: the value is not clipped", tt.field, len(e.Reason))
		}
		if tt.class == BadTTL && (ev.ID != "e-1" || ev.Tenant != "acme" || ev.User != "u-1" || ev.Base.IsZero()) {
			t.Errorf("%s: the event's ids and time are not returned with the error: %+v", tt.field, ev)
		}
	}
	h := ttlDecoder(t, "header:x-ttl")
	rec := Source{Value: []byte(head + `}`), Time: recordTime}
	rec.Headers[0] = Header{Value: []byte("1h"), Count: 2}
	if _, err := h.DecodeRecord(&rec); err == nil || !strings.Contains(err.Error(), "header x-ttl appears 2 times") {
		t.Errorf("a header given twice: %v", err)
	}
}

// The TTL's source is checked at start-up like the other fields'.
func TestCompileRefusesTTLSource(t *testing.T) {
	for spec, want := range map[string]string{
		"key":                `--ttl-from "key": it cannot come from the record key`,
		"ttl":                `--ttl-from "ttl": want json:PATH, header:NAME or key`,
		"json:tenant_id":     "--tenant-from and --ttl-from both read json:tenant_id",
		"json:occurred_at":   "--event-time-from and --ttl-from both read json:occurred_at",
		"header:cellttl.ttl": "headers named cellttl.* are cellttl's own",
	} {
		f := DefaultFields()
		f.TTL = spec
		if _, err := f.Compile(flagLabels); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--ttl-from %q: %v, want %q", spec, err, want)
		}
	}
}

// parseTTL agrees with duration.Parse, tenants.yaml's parser, wherever
// both accept a value; it only adds whole seconds, saturation and the
// refusals of negative and sub-millisecond values.
func TestParseTTLAgreesWithTenantsYAML(t *testing.T) {
	for _, s := range []string{"0s", "1ms", "90m", "2d", "1d12h", "1.5d", "0.25h", "1h30m15s", "3650d", "1.001s", "12345ms", "7d", "1m0.5s", ".5h", "1.h"} {
		want, err := duration.Parse(s)
		got, why := parseTTL(s)
		if err != nil || why != "" || got != want {
			t.Errorf("%q: parseTTL %v (%s), duration.Parse %v (%v)", s, got, why, want, err)
		}
	}
	for _, s := range []string{"1x", "h", "1hh", "1 h", "1h-1m", "++1h", "∞", "1e3s", "-1h"} {
		if _, why := parseTTL(s); why == "" {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"90m", "2d", "1.5h", "3600", "1d12h", "0.0001s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, why := parseTTL(s)
		if why != "" {
			return
		}
		if got < 0 {
			t.Fatalf("%q: %v", s, got)
		}
		if allDigits(s) || got == MaxRequestedTTL {
			return
		}
		// Where duration.Parse reads the value exactly (at most 3
		// fraction digits per number), both read the same.
		if want, err := duration.Parse(s); err == nil && fractionDigits(s) <= 3 && want != got {
			t.Fatalf("%q: parseTTL %v, duration.Parse %v", s, got, want)
		}
	})
}

func fractionDigits(s string) int {
	n, most, in := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			in, n = true, 0
		case c >= '0' && c <= '9':
			if in {
				n++
				most = max(most, n)
			}
		default:
			in = false
		}
	}
	return most
}

// Reading a TTL allocates nothing: it runs on every event.
func TestEventTTLAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	d := ttlDecoder(t, "json:ttl")
	rec := Source{Value: []byte(`{"event_id":"e-1","tenant_id":"acme","occurred_at":"2026-11-21T09:00:00Z","ttl":"1d12h"}`), Time: recordTime}
	if n := testing.AllocsPerRun(200, func() { _, _ = d.DecodeRecord(&rec) }); n != 0 {
		t.Errorf("DecodeRecord with a TTL allocates %v times per event, want 0", n)
	}
}
