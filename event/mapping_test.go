package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func mapping(t testing.TB, f Fields) *Mapping {
	t.Helper()
	m, err := f.Compile(flagLabels)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A configuration that cannot work is refused at start-up with the flag
// and the value it got.
func TestCompileRefuses(t *testing.T) {
	with := func(change func(*Fields)) Fields {
		f := DefaultFields()
		change(&f)
		return f
	}
	tests := []struct {
		name string
		f    Fields
		want string
	}{
		{"no kind", with(func(f *Fields) { f.Tenant = "customer_id" }), `--tenant-from "customer_id": want json:PATH, header:NAME or key`},
		{"unknown kind", with(func(f *Fields) { f.User = "cookie:u" }), `--user-from "cookie:u": want json:PATH, header:NAME or key`},
		{"empty path", with(func(f *Fields) { f.EventID = "json:" }), `--event-id-from "json:": json: needs a field name`},
		{"empty segment", with(func(f *Fields) { f.Tenant = "json:context..id" }), `--tenant-from "json:context..id": the path has an empty segment`},
		{"too deep", with(func(f *Fields) { f.Tenant = "json:a.b.c.d.e.f.g.h.i" }), "the path has 9 segments, more than 8"},
		{"empty header", with(func(f *Fields) { f.Tenant = "header:" }), `--tenant-from "header:": header: needs a header name`},
		{"key with a name", with(func(f *Fields) { f.Tenant = "key:x" }), `--tenant-from "key:x": the record key is "key"`},
		{"time from the key", with(func(f *Fields) { f.Time = "key" }), `--event-time-from "key": it cannot come from the record key`},
		{"format", with(func(f *Fields) { f.TimeFormat = "unix-us" }), `--event-time-format "unix-us": want rfc3339, unix-ms, unix-s or auto`},
		{"two from the key", with(func(f *Fields) { f.Tenant, f.EventID = "key", "key" }), "--event-id-from and --tenant-from both read key"},
		{"two from one header", with(func(f *Fields) { f.Tenant, f.User = "header:x", "header:x" }), "--tenant-from and --user-from both read header:x"},
		{"two from one field", with(func(f *Fields) { f.User = "json:tenant_id" }), "--tenant-from and --user-from both read json:tenant_id"},
		{"one inside the other", with(func(f *Fields) { f.User = "json:tenant_id.user" }), "one path lies inside the other"},
		{"two in different cases", with(func(f *Fields) { f.User = "json:Tenant_ID" }), "the paths differ only in case"},
		{"parents in different cases", with(func(f *Fields) { f.Tenant, f.User = "json:ctx.t", "json:CTX.u" }), "the paths differ only in case"},
		{"U+FFFD", with(func(f *Fields) { f.Tenant = "json:\ufffd" }), "the path holds U+FFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.f.Compile(flagLabels)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := DefaultFields().Compile(flagLabels); err != nil {
		t.Errorf("the contract's own mapping: %v", err)
	}
}

// The shapes teams have: a customer_id, context.session.id and
// epoch milliseconds; the tenant in a header or the record key.
func TestDecodeMapped(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		f    Fields
		rec  Source
		want Event
	}{
		{"nested paths and epoch ms",
			Fields{Tenant: "json:customer_id", EventID: "json:context.session.id", User: "json:context.user.id", Time: "json:ts", TimeFormat: "unix-ms"},
			Source{Value: []byte(`{"customer_id":"acme","ts":1795251600123,"context":{"page":{"url":"/x"},"session":{"id":"s-1"},"user":{"id":"u-7"}}}`), Time: at},
			Event{ID: "s-1", Tenant: "acme", User: "u-7", Base: at.Add(123 * time.Millisecond)}},
		{"tenant from a header",
			Fields{Tenant: "header:x-tenant", EventID: "json:id", User: "json:user", Time: "json:at", TimeFormat: "rfc3339"},
			Source{Value: []byte(`{"id":"e-1","at":"2026-11-21T09:00:00Z"}`), Headers: [numFields]Header{{Value: []byte("globex"), Count: 1}}, Time: at},
			Event{ID: "e-1", Tenant: "globex", Base: at}},
		{"tenant from the key, time from a header in seconds",
			Fields{Tenant: "key", EventID: "json:event_id", User: "header:user", Time: "header:ts", TimeFormat: "unix-s"},
			Source{Value: []byte(`{"event_id":"e-2"}`), Key: []byte("initech"),
				Headers: [numFields]Header{{Value: []byte("u-1"), Count: 1}, {Value: []byte("1795251599.5"), Count: 1}}, Time: at},
			Event{ID: "e-2", Tenant: "initech", User: "u-1", Base: at.Add(-500 * time.Millisecond)}},
		{"event id from the key",
			Fields{Tenant: "json:tenant_id", EventID: "key", User: "json:user_id", Time: "json:occurred_at", TimeFormat: "rfc3339"},
			Source{Value: []byte(`{"tenant_id":"acme"}`), Key: []byte("k-9"), Time: at},
			Event{ID: "k-9", Tenant: "acme", Base: at}},
		{"a null parent is an absent user",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:ctx.user", Time: "json:ts", TimeFormat: "auto"},
			Source{Value: []byte(`{"t":"a","e":"b","ctx":null,"ts":1795251600}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: at}},
		{"auto: milliseconds by magnitude",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:u", Time: "json:ts", TimeFormat: "auto"},
			Source{Value: []byte(`{"t":"a","e":"b","ts":1795251600000}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: at}},
		{"auto: an RFC 3339 string",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:u", Time: "json:ts", TimeFormat: "auto"},
			Source{Value: []byte(`{"t":"a","e":"b","ts":"2026-11-21T09:00:00Z"}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: at}},
		{"auto: a number in a string",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:u", Time: "json:ts", TimeFormat: "auto"},
			Source{Value: []byte(`{"t":"a","e":"b","ts":"1795251600000"}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: at}},
		{"epoch ms beyond the skew: the record timestamp",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:u", Time: "json:ts", TimeFormat: "unix-ms"},
			Source{Value: []byte(`{"t":"a","e":"b","ts":1795251900001}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: at, Clamped: true}},
		{"before 1970 kept (skipped as expired by the caller)",
			Fields{Tenant: "json:t", EventID: "json:e", User: "json:u", Time: "json:ts", TimeFormat: "unix-s"},
			Source{Value: []byte(`{"t":"a","e":"b","ts":-1.25}`), Time: at},
			Event{ID: "b", Tenant: "a", Base: time.Unix(-2, 75e7)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decoder{MaxBytes: 1 << 10, MaxClockSkew: 5 * time.Minute, Mapping: mapping(t, tt.f)}
			got, err := d.DecodeRecord(&tt.rec)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want.ID || got.Tenant != tt.want.Tenant || got.User != tt.want.User || !got.Base.Equal(tt.want.Base) || got.Clamped != tt.want.Clamped {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Each refusal names the configured path, header or key, and the value.
func TestDecodeMappedInvalid(t *testing.T) {
	nested := Fields{Tenant: "json:customer_id", EventID: "json:context.session.id", User: "json:user", Time: "json:ts", TimeFormat: "unix-ms"}
	headers := Fields{Tenant: "header:x-tenant", EventID: "key", User: "json:user", Time: "header:ts", TimeFormat: "unix-ms"}
	one := func(v string) [numFields]Header { return [numFields]Header{{Value: []byte(v), Count: 1}} }
	tests := []struct {
		name       string
		f          Fields
		rec        Source
		field, why string
	}{
		{"nested id missing", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{}}}`)},
			"context.session.id", "context.session.id is missing"},
		{"parent missing", nested, Source{Value: []byte(`{"customer_id":"a"}`)},
			"context.session.id", "context.session.id is missing"},
		{"nested id a number", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":7}}}`)},
			"context.session.id", "context.session.id must be a string, not a JSON number"},
		{"parent not an object", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":"s-1"}}`)},
			"context.session.id", "context.session.id cannot be read: context.session is a JSON string, not an object"},
		{"parent twice", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"context":{"session":{"id":"y"}}}`)},
			"context", "context appears more than once"},
		{"nested key twice", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x","id":"y"}}}`)},
			"context.session.id", "context.session.id appears more than once"},
		{"four-byte case variant", Fields{Tenant: "json:a.\U00010400", EventID: "json:event_id", User: "json:u", Time: "json:t", TimeFormat: "rfc3339"},
			Source{Value: []byte("{\"event_id\":\"e\",\"a\":{\"\U00010400\":\"t\",\"\U00010428\":\"x\"}}")},
			"a.\U00010400", "differs from a.\U00010400 only in case"},
		{"nested key in another case", nested, Source{Value: []byte(`{"customer_id":"a","context":{"Session":{"id":"x"}}}`)},
			"context.session", `key "Session" differs from context.session only in case`},
		{"tenant a number", nested, Source{Value: []byte(`{"customer_id":5,"context":{"session":{"id":"x"}}}`)},
			"customer_id", "customer_id must be a string, not a JSON number"},
		{"hash in a nested id", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x#y"}}}`)},
			"context.session.id", `context.session.id "x#y" contains '#'`},
		{"epoch as a string", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"ts":"1795251600000"}`)},
			"ts", "ts must be a JSON number of epoch milliseconds (--event-time-format unix-ms), not a JSON string"},
		{"epoch with an exponent", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"ts":1.7e12}`)},
			"ts", "ts 1.7e12 is not a plain decimal number of epoch milliseconds"},
		{"epoch out of range", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"ts":1000000000000000}`)},
			"ts", "ts 1000000000000000 is not within the range of times a row key can hold"},
		{"epoch past 2286, within the skew of the record timestamp", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"ts":10000000000000}`), Time: time.UnixMilli(9_999_999_999_999)},
			"ts", "ts 10000000000000 is later than 2286-11-20T17:46:39.999Z"},
		{"epoch in a record without a timestamp", nested, Source{Value: []byte(`{"customer_id":"a","context":{"session":{"id":"x"}},"ts":1777539600000}`), Time: time.Unix(0, 1)},
			"ts", "ts 2026-04-30T09:00:00Z comes in a Kafka record without a timestamp (-1)"},
		{"header missing", headers, Source{Value: []byte(`{}`), Key: []byte("e")},
			"header:x-tenant", "header x-tenant is missing"},
		{"header twice", headers, Source{Value: []byte(`{}`), Key: []byte("e"), Headers: [numFields]Header{{Value: []byte("a"), Count: 2}}},
			"header:x-tenant", "header x-tenant appears 2 times"},
		{"header with a hash", headers, Source{Value: []byte(`{}`), Key: []byte("e"), Headers: one("a#b")},
			"header:x-tenant", `header x-tenant "a#b" contains '#'`},
		{"no key", headers, Source{Value: []byte(`{}`), Headers: one("a")},
			"key", "record key is missing"},
		{"empty key", headers, Source{Value: []byte(`{}`), Key: []byte{}, Headers: one("a")},
			"key", "record key is empty"},
		{"time header not a number", headers, Source{Value: []byte(`{}`), Key: []byte("e"),
			Headers: [numFields]Header{{Value: []byte("a"), Count: 1}, {Value: []byte("2026-11-21T09:00:00Z"), Count: 1}}},
			"header:ts", `header ts "2026-11-21T09:00:00Z" is not a plain decimal number of epoch milliseconds`},
		{"value not an object, whatever the mapping", headers, Source{Value: []byte(`[]`), Key: []byte("e"), Headers: one("a")},
			"", "value is a JSON array, not an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decoder{MaxBytes: 1 << 10, MaxClockSkew: 5 * time.Minute, Mapping: mapping(t, tt.f)}
			switch tt.rec.Time {
			case time.Time{}:
				tt.rec.Time = recordTime
			case time.Unix(0, 1):
				tt.rec.Time = time.Time{}
			}
			_, err := d.DecodeRecord(&tt.rec)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Class == "" {
				t.Errorf("%q has no class", e.Error())
			}
			if e.Field != tt.field || !strings.Contains(e.Error(), tt.why) {
				t.Errorf("got field %q reason %q, want field %q reason containing %q", e.Field, e.Error(), tt.field, tt.why)
			}
		})
	}
}

// Epoch numbers are read exactly, as written, not through a float.
func TestParseEpoch(t *testing.T) {
	tests := []struct {
		s      string
		format TimeFormat
		want   time.Time
	}{
		{"1795297116069", UnixMillis, time.UnixMilli(1795297116069)},
		{"1795297116.069", UnixSeconds, time.UnixMilli(1795297116069)},
		{"1795297116.0690000009", UnixSeconds, time.Unix(1795297116, 69000000)},
		{"1795297116069.5", UnixMillis, time.UnixMilli(1795297116069).Add(500 * time.Microsecond)},
		{"0", UnixMillis, time.Unix(0, 0)},
		{"-1500", UnixMillis, time.Unix(-2, 5e8)},
		{"00012", UnixSeconds, time.Unix(12, 0)},
		{"99999999999", Auto, time.Unix(99999999999, 0)},
		{"100000000000", Auto, time.UnixMilli(100000000000)},
		{"999999999999999", UnixMillis, time.UnixMilli(999999999999999)},
	}
	for _, tt := range tests {
		got, why := parseEpoch(tt.s, tt.format)
		if why != "" || !got.Equal(tt.want) {
			t.Errorf("parseEpoch(%q, %s) = %v, %q; want %v", tt.s, tt.format, got, why, tt.want)
		}
	}
	for _, s := range []string{"", "-", "1.", ".5", "1e3", "+1", "1_000", "0x10", "1000000000000000", "1 "} {
		if got, why := parseEpoch(s, UnixMillis); why == "" {
			t.Errorf("parseEpoch(%q) = %v, want a refusal", s, got)
		}
	}
	if _, why := parseEpoch("1000000000000", UnixSeconds); why == "" {
		t.Error("13 digits of seconds accepted")
	}
}

// Whatever a nested mapping accepts, encoding/json reads the same values
// at those paths: no event means one thing to cellttl and another to the
// programs that read the rows.
func FuzzMappedMatchesEncodingJSON(f *testing.F) {
	m := mapping(f, Fields{Tenant: "json:account.id", EventID: "json:id", User: "json:ctx.user.id", Time: "json:ts", TimeFormat: "unix-ms"})
	for _, s := range []string{
		`{"id":"e","account":{"id":"a"},"ctx":{"user":{"id":"u"}},"ts":1795297116069}`,
		`{"id":"e","account":{"id":"a","ID":"b"}}`,
		`{"id":"e","account":{"id":"a"},"account":{"id":"b"}}`,
		`{"id":"e","account":"a","ts":-5}`,
		`{"id":"e","Account":{"id":"a"},"ctx":{"user":null}}`,
		`{"":1}`,
	} {
		f.Add([]byte(s))
	}
	d := Decoder{MaxBytes: 1 << 16, Mapping: m}
	// And a mapping that reads nothing from JSON: any object will do.
	none := Decoder{MaxBytes: 1 << 16, Mapping: mapping(f, Fields{Tenant: "header:t", EventID: "key", User: "header:u", Time: "header:ts", TimeFormat: "auto"})}
	hs := [numFields]Header{{Value: []byte("acme"), Count: 1}}
	f.Fuzz(func(t *testing.T, v []byte) {
		var obj map[string]any
		_, err := none.DecodeRecord(&Source{Value: v, Key: []byte("e"), Headers: hs, Time: recordTime})
		if isObject := json.Unmarshal(v, &obj) == nil && obj != nil; (err == nil) != isObject {
			t.Fatalf("%q with nothing read from JSON: %v (a JSON object: %t)", v, err, isObject)
		}
		ev, err := d.DecodeRecord(&Source{Value: v, Time: recordTime})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Error() == "" || e.Class == "" {
				t.Fatalf("error %v is not a described, classified *Error", err)
			}
			return
		}
		var doc struct {
			ID      string `json:"id"`
			Account struct {
				ID string `json:"id"`
			} `json:"account"`
			Ctx struct {
				User *struct {
					ID string `json:"id"`
				} `json:"user"`
			} `json:"ctx"`
			TS *json.Number `json:"ts"`
		}
		if err := json.Unmarshal(v, &doc); err != nil {
			t.Fatalf("accepted %s, which encoding/json cannot read: %v", v, err)
		}
		user := ""
		if doc.Ctx.User != nil {
			user = doc.Ctx.User.ID
		}
		if doc.ID != ev.ID || doc.Account.ID != ev.Tenant || user != ev.User {
			t.Fatalf("%s: ours %q/%q/%q, encoding/json %q/%q/%q", v, ev.ID, ev.Tenant, ev.User, doc.ID, doc.Account.ID, user)
		}
		if doc.TS != nil && !ev.Clamped {
			ms, err := doc.TS.Int64()
			if err == nil && ev.Base.UnixMilli() != ms {
				t.Fatalf("%s: ts read as %d ms by encoding/json, %d by us", v, ms, ev.Base.UnixMilli())
			}
		}
	})
}

// A nested path costs no allocation either.
func TestDecodeMappedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	d := Decoder{MaxBytes: 1 << 10, Mapping: mapping(t, Fields{Tenant: "json:customer_id", EventID: "json:context.session.id", User: "header:user", Time: "json:ts", TimeFormat: "auto"})}
	rec := Source{Value: []byte(`{"customer_id":"acme","ts":1795251600123,"context":{"page":{"url":"/x"},"session":{"id":"s-1"}}}`),
		Headers: [numFields]Header{{Value: []byte("u-1"), Count: 1}}, Time: recordTime}
	if n := testing.AllocsPerRun(200, func() { _, _ = d.DecodeRecord(&rec) }); n != 0 {
		t.Errorf("DecodeRecord allocates %v times per event, want 0", n)
	}
}

// A mapping that reads nothing from JSON still validates the value, and no
// key, not even an empty one, trips its empty tree.
func TestDecodeNothingFromJSON(t *testing.T) {
	d := Decoder{MaxBytes: 1 << 10, Mapping: mapping(t, Fields{Tenant: "header:t", EventID: "key", User: "header:u", Time: "header:ts", TimeFormat: "unix-ms"})}
	hs := [numFields]Header{{Value: []byte("acme"), Count: 1}, {Value: []byte("u-1"), Count: 1}, {Value: []byte("1795251600123"), Count: 1}}
	for _, v := range []string{`{}`, `{"":1}`, `{"a":{"":[]},"":""}`} {
		ev, err := d.DecodeRecord(&Source{Value: []byte(v), Key: []byte("e-1"), Headers: hs, Time: time.UnixMilli(1795251600123)})
		if err != nil || ev.Tenant != "acme" || ev.ID != "e-1" || ev.User != "u-1" || ev.Base.UnixMilli() != 1795251600123 {
			t.Errorf("%s: %+v, %v", v, ev, err)
		}
	}
	if _, err := d.DecodeRecord(&Source{Value: []byte(`{"":`), Key: []byte("e-1"), Headers: hs}); err == nil {
		t.Error("invalid JSON accepted")
	}
}

// flagLabels are the worker's flags, which the tests' errors name.
var flagLabels = Labels{Tenant: "--tenant-from", EventID: "--event-id-from", User: "--user-from", Time: "--event-time-from",
	TTL: "--ttl-from", TimeFormat: "--event-time-format"}
