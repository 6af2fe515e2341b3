package event

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var (
	now        = time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
	recordTime = now.Add(-time.Minute)
	dec        = Decoder{MaxBytes: 1 << 10, MaxClockSkew: 5 * time.Minute}
)

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    Event
		clamped bool
	}{
		{"all fields", `{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T08:00:00.123Z","page":"/x"}`,
			Event{ID: "e-1", Tenant: "acme", User: "u-42", Base: time.Date(2026, 4, 30, 8, 0, 0, 123e6, time.UTC)}, false},
		{"no occurred_at: record time", `{"event_id":"e-1","tenant_id":"acme"}`,
			Event{ID: "e-1", Tenant: "acme", Base: recordTime}, false},
		{"null occurred_at: record time", `{"event_id":"e-1","tenant_id":"acme","occurred_at":null}`,
			Event{ID: "e-1", Tenant: "acme", Base: recordTime}, false},
		{"offset time zone", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T10:00:00+02:00"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(2026, 4, 30, 8, 0, 0, 0, time.UTC)}, false},
		{"within skew kept", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T09:04:59Z"}`,
			Event{ID: "e", Tenant: "t", Base: now.Add(4*time.Minute + 59*time.Second)}, false},
		{"beyond skew clamped", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T09:05:01Z"}`,
			Event{ID: "e", Tenant: "t", Base: now, Clamped: true}, true},
		{"before 1970 kept (it will be skipped as expired)", `{"event_id":"e","tenant_id":"t","occurred_at":"1969-07-20T20:17:40Z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)}, false},
		{"unicode ids", `{"event_id":"é-1","tenant_id":"ümlaut"}`, Event{ID: "é-1", Tenant: "ümlaut", Base: recordTime}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dec.Decode([]byte(tt.value), recordTime, now)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want.ID || got.Tenant != tt.want.Tenant || got.User != tt.want.User || !got.Base.Equal(tt.want.Base) || got.Clamped != tt.clamped {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	long := strings.Repeat("x", 129)
	tests := []struct {
		name, value, field, reason string
	}{
		{"not JSON", `not json`, "", "not a JSON object"},
		{"JSON array", `[1,2]`, "", "JSON array, not an object"},
		{"JSON string", `"x"`, "", "JSON string, not an object"},
		{"truncated", `{"event_id":"e"`, "", "not a JSON object"},
		{"missing event_id", `{"tenant_id":"t"}`, "event_id", "event_id is missing"},
		{"missing tenant_id", `{"event_id":"e"}`, "tenant_id", "tenant_id is missing"},
		{"empty tenant_id", `{"event_id":"e","tenant_id":""}`, "tenant_id", "tenant_id is empty"},
		{"number event_id", `{"event_id":5,"tenant_id":"t"}`, "event_id", "event_id must be a string, not a JSON number"},
		{"hash in event_id", `{"event_id":"e#1","tenant_id":"t"}`, "event_id", `event_id "e#1" contains '#'`},
		{"hash in tenant_id", `{"event_id":"e","tenant_id":"a#b"}`, "tenant_id", `tenant_id "a#b" contains '#'`},
		{"control char", `{"event_id":"e\n","tenant_id":"t"}`, "event_id", "control character"},
		{"too long", `{"event_id":"` + long + `","tenant_id":"t"}`, "event_id", "is 129 bytes, more than 128"},
		{"bad user_id", `{"event_id":"e","tenant_id":"t","user_id":"u#1"}`, "user_id", `user_id "u#1" contains '#'`},
		{"bad occurred_at", `{"event_id":"e","tenant_id":"t","occurred_at":"yesterday"}`, "occurred_at", `occurred_at "yesterday" is not an RFC 3339 time`},
		{"occurred_at number", `{"event_id":"e","tenant_id":"t","occurred_at":17}`, "occurred_at", "must be a string"},
		{"oversize", `{"event_id":"e","tenant_id":"t","pad":"` + strings.Repeat("p", 1100) + `"}`, "", "more than the limit of 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dec.Decode([]byte(tt.value), recordTime, now)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Field != tt.field || !strings.Contains(e.Error(), tt.reason) {
				t.Errorf("got field %q reason %q, want field %q reason containing %q", e.Field, e.Error(), tt.field, tt.reason)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T09:00:00.123Z"}`,
		`{"event_id":"e","tenant_id":"t","occurred_at":"9999-12-31T23:59:59Z"}`,
		`{"event_id":"e","tenant_id":"t","occurred_at":"0001-01-01T00:00:00Z"}`,
		`{"event_id":"\u0000","tenant_id":"t"}`, `[]`, `null`, "\xff\xfe", `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		ev, err := dec.Decode(value, recordTime, now)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Error() == "" {
				t.Fatalf("error %v is not a described *Error", err)
			}
			return
		}
		for _, id := range []string{ev.ID, ev.Tenant} {
			if id == "" || len(id) > 128 || strings.ContainsRune(id, '#') || !utf8.ValidString(id) {
				t.Fatalf("accepted id %q", id)
			}
		}
		if ev.Base.After(now.Add(dec.MaxClockSkew)) {
			t.Fatalf("base %s beyond the skew bound", ev.Base)
		}
	})
}

// The scanner agrees with encoding/json on every valid object: same string
// fields (last duplicate wins), same verdict on their types.
func FuzzScanMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T09:00:00.123Z"}`,
		`{"a":{"event_id":"x","b":[1,"}",{"c":"\""}]},"event_id":"e\u0031","tenant_id":"t","tenant_id":"u"}`,
		`{"event_id" : 5 , "tenant_id":null,"x":[ ],"user_id":{"y":1}}`,
		` { "occurred_at" : "2026-01-01T00:00:00Z" , "n": -1.5e3, "t": true } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		_, perr := parse(v)
		if (perr != errSyntax) != json.Valid(v) {
			t.Fatalf("parse says valid=%t, json.Valid %t (%v)", perr != errSyntax, json.Valid(v), perr)
		}
		var m map[string]any
		if json.Unmarshal(v, &m) != nil || m == nil {
			return
		}
		got, err := parse(v)
		if err != nil {
			t.Fatalf("scan of a valid object: %v", err)
		}
		for name, fl := range map[string]field{"event_id": got.eventID, "tenant_id": got.tenantID, "user_id": got.userID, "occurred_at": got.occurredAt} {
			want, present := m[name]
			if fl.present != present {
				t.Fatalf("%s: present %t, encoding/json %t", name, fl.present, present)
			}
			switch w := want.(type) {
			case string:
				if !utf8.ValidString(fl.s) {
					// encoding/json swaps invalid bytes for U+FFFD; the scanner
					// keeps them, and the id rules then refuse them.
					continue
				}
				if fl.s != w || fl.kind != "" || fl.isNull {
					t.Fatalf("%s: %+v, encoding/json %q", name, fl, w)
				}
			case nil:
				if present && !fl.isNull {
					t.Fatalf("%s: %+v, encoding/json null", name, fl)
				}
			default:
				if fl.kind == "" {
					t.Fatalf("%s: read as a string %q, encoding/json %T", name, fl.s, w)
				}
			}
		}
	})
}

func TestDecodeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	v := []byte(`{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T09:00:00.123Z","page":"/x","n":[1,2,{"a":"b"}]}`)
	if n := testing.AllocsPerRun(200, func() { _, _ = dec.Decode(v, recordTime, now) }); n != 0 {
		t.Errorf("Decode allocates %v times per event, want 0", n)
	}
}
