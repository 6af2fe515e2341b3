package event

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var (
	recordTime = time.Date(2026, 4, 30, 9, 0, 0, 0, time.UTC)
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
		{"within skew kept", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T09:05:00Z"}`,
			Event{ID: "e", Tenant: "t", Base: recordTime.Add(5 * time.Minute)}, false},
		{"beyond skew: the record timestamp", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T09:05:00.001Z"}`,
			Event{ID: "e", Tenant: "t", Base: recordTime, Clamped: true}, true},
		{"a century ahead: the record timestamp", `{"event_id":"e","tenant_id":"t","occurred_at":"2126-04-30T09:00:00Z"}`,
			Event{ID: "e", Tenant: "t", Base: recordTime, Clamped: true}, true},
		{"before 1970 kept (it will be skipped as expired)", `{"event_id":"e","tenant_id":"t","occurred_at":"1969-07-20T20:17:40Z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)}, false},
		{"year 1 means year 1", `{"event_id":"e","tenant_id":"t","occurred_at":"0001-01-01T00:00:00Z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"lowercase t and z", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30t08:00:00.5z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(2026, 4, 30, 8, 0, 0, 5e8, time.UTC)}, false},
		{"leap second: the next minute's start", `{"event_id":"e","tenant_id":"t","occurred_at":"2016-12-31T23:59:60Z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
		{"leap second with an offset", `{"event_id":"e","tenant_id":"t","occurred_at":"2016-12-31T18:59:60.250-05:00"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(2017, 1, 1, 0, 0, 0, 25e7, time.UTC)}, false},
		{"more than nanosecond digits", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T08:00:00.123456789987Z"}`,
			Event{ID: "e", Tenant: "t", Base: time.Date(2026, 4, 30, 8, 0, 0, 123456789, time.UTC)}, false},
		{"escaped surrogate pair", `{"event_id":"e\ud83d\ude00","tenant_id":"t\u00e9"}`,
			Event{ID: "e\U0001F600", Tenant: "té", Base: recordTime}, false},
		{"escaped key", `{"event\u005fid":"e","tenant_id":"t"}`, Event{ID: "e", Tenant: "t", Base: recordTime}, false},
		{"unicode ids", `{"event_id":"é-1","tenant_id":"ümlaut"}`, Event{ID: "é-1", Tenant: "ümlaut", Base: recordTime}, false},
		{"other keys in other cases are fine", `{"event_id":"e","tenant_id":"t","Page":"/x","EVENT":"click"}`,
			Event{ID: "e", Tenant: "t", Base: recordTime}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dec.Decode([]byte(tt.value), recordTime)
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
		{"tenant_id twice", `{"event_id":"e","tenant_id":"a","tenant_id":"b"}`, "tenant_id", "tenant_id appears more than once"},
		{"event_id twice, same value", `{"event_id":"e","tenant_id":"a","event_id":"e"}`, "event_id", "event_id appears more than once"},
		{"user_id twice, one null", `{"event_id":"e","tenant_id":"a","user_id":null,"user_id":"u"}`, "user_id", "user_id appears more than once"},
		{"occurred_at twice", `{"event_id":"e","tenant_id":"a","occurred_at":"2026-04-30T08:00:00Z","occurred_at":"2026-04-30T07:00:00Z"}`, "occurred_at", "occurred_at appears more than once"},
		{"twice through an escape", `{"event_id":"e","tenant_id":"a","tenant\u005fid":"b"}`, "tenant_id", "tenant_id appears more than once"},
		{"case variant", `{"event_id":"e","tenant_id":"a","Tenant_ID":"b"}`, "tenant_id", `key "Tenant_ID" differs from tenant_id only in case`},
		{"case variant alone", `{"EVENT_ID":"e","tenant_id":"a"}`, "event_id", `key "EVENT_ID" differs from event_id only in case`},
		{"Unicode fold variant", `{"event_id":"e","tenant_id":"a","uſer_id":"x"}`, "user_id", "differs from user_id only in case"},
		{"lone high surrogate", `{"event_id":"x\ud800","tenant_id":"t"}`, "event_id", `event_id "x\ud800" escapes a lone UTF-16 surrogate`},
		{"lone low surrogate", `{"event_id":"x\udfff","tenant_id":"t"}`, "event_id", "escapes a lone UTF-16 surrogate"},
		{"high surrogate then a letter", `{"event_id":"e","tenant_id":"t\ud800\u0041"}`, "tenant_id", "escapes a lone UTF-16 surrogate"},
		{"lone surrogate in occurred_at", `{"event_id":"e","tenant_id":"t","occurred_at":"2026\ud800"}`, "occurred_at", "escapes a lone UTF-16 surrogate"},
		{"raw invalid UTF-8", "{\"event_id\":\"x\xff\",\"tenant_id\":\"t\"}", "event_id", "not valid UTF-8"},
		{"escaped and raw invalid UTF-8", "{\"event_id\":\"\\n\xff\",\"tenant_id\":\"t\"}", "event_id", "not valid UTF-8"},
		{"second 61", `{"event_id":"e","tenant_id":"t","occurred_at":"2016-12-31T23:59:61Z"}`, "occurred_at", "not an RFC 3339 time"},
		{"February 30", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-02-30T00:00:00Z"}`, "occurred_at", "not an RFC 3339 time"},
		{"no zone", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T08:00:00"}`, "occurred_at", "not an RFC 3339 time"},
		{"space for T", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30 08:00:00Z"}`, "occurred_at", "not an RFC 3339 time"},
		{"dot without digits", `{"event_id":"e","tenant_id":"t","occurred_at":"2026-04-30T08:00:00.Z"}`, "occurred_at", "not an RFC 3339 time"},
		{"BOM", "\ufeff" + `{"event_id":"e","tenant_id":"t"}`, "", "not a JSON object"},
		{"NaN", `{"event_id":"e","tenant_id":"t","n":NaN}`, "", "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dec.Decode([]byte(tt.value), recordTime)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Class == "" {
				t.Errorf("%q has no class", e.Error())
			}
			if e.Field != tt.field || !strings.Contains(e.Error(), tt.reason) {
				t.Errorf("got field %q reason %q, want field %q reason containing %q", e.Field, e.Error(), tt.field, tt.reason)
			}
		})
	}
}

// The time an event counts from comes from the record alone; without a
// record timestamp an occurred_at cannot be checked for skew, and without
// either there is no time at all.
func TestDecodeRecordTime(t *testing.T) {
	// A record without a timestamp bounds nothing: an event that gives
	// its own time in one is a dead letter, however near its time, or it
	// would buy whatever it claims (2286 included).
	for _, at := range []string{"2200-01-01T00:00:00Z", "2026-04-30T09:00:00Z", "2286-11-20T17:46:39.999Z"} {
		_, err := dec.Decode([]byte(`{"event_id":"e","tenant_id":"t","occurred_at":"`+at+`"}`), time.Time{})
		if e, ok := err.(*Error); !ok || e.Class != NoRecordTime || e.Field != "occurred_at" || !strings.Contains(e.Reason, at+" comes in a Kafka record without a timestamp") {
			t.Errorf("occurred_at %s without a record timestamp: %v", at, err)
		}
	}
	_, err := dec.Decode([]byte(`{"event_id":"e","tenant_id":"t"}`), time.Time{})
	if e, ok := err.(*Error); !ok || e.Class != Missing || e.Field != "occurred_at" || !strings.Contains(e.Reason, "no time to count the TTL from") {
		t.Errorf("no time at all: %v", err)
	}
	last := time.UnixMilli(9_999_999_999_999)
	_, err = dec.Decode([]byte(`{"event_id":"e","tenant_id":"t","occurred_at":"2286-11-20T17:46:40Z"}`), last)
	if e, ok := err.(*Error); !ok || e.Field != "occurred_at" || !strings.Contains(e.Reason, "later than 2286-11-20T17:46:39.999Z, the last time a row key can hold") {
		t.Errorf("occurred_at past what a row key holds: %v", err)
	}
	late := time.UnixMilli(10_000_000_000_000)
	for _, v := range []string{`{"event_id":"e","tenant_id":"t"}`, `{"event_id":"e","tenant_id":"t","occurred_at":"9999-01-01T00:00:00Z"}`} {
		_, err = dec.Decode([]byte(v), late)
		if e, ok := err.(*Error); !ok || !strings.Contains(e.Reason, "the record timestamp 2286-11-20T17:46:40Z is later than 2286-11-20T17:46:39.999Z") {
			t.Errorf("%s with a record timestamp past 2286: %v", v, err)
		}
	}
	if ev, err := dec.Decode([]byte(`{"event_id":"e","tenant_id":"t"}`), last); err != nil || !ev.Base.Equal(last) {
		t.Errorf("the last millisecond a key holds: %+v, %v", ev, err)
	}
}

// Nesting is refused exactly where encoding/json refuses it: at the limit
// accepted, one container deeper not.
func TestDecodeDepthLimit(t *testing.T) {
	big := Decoder{MaxBytes: 1 << 20}
	nested := func(arrays int) []byte {
		return []byte(`{"event_id":"e","tenant_id":"t","x":` + strings.Repeat("[", arrays) + strings.Repeat("]", arrays) + `}`)
	}
	at, over := nested(maxDepth-1), nested(maxDepth) // plus the object itself
	if !json.Valid(at) || json.Valid(over) {
		t.Fatalf("encoding/json's limit moved: valid at %t, one deeper %t", json.Valid(at), json.Valid(over))
	}
	if _, err := big.Decode(at, recordTime); err != nil {
		t.Errorf("nesting at encoding/json's limit refused: %v", err)
	}
	if _, err := big.Decode(over, recordTime); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Errorf("nesting one deeper than encoding/json accepts: %v", err)
	}
}

// downstream is how other programs read an event: encoding/json into a
// struct, which matches keys regardless of case and takes the last of
// duplicates.
type downstream struct {
	EventID    string `json:"event_id"`
	TenantID   string `json:"tenant_id"`
	UserID     string `json:"user_id"`
	OccurredAt string `json:"occurred_at"`
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"e-1","tenant_id":"acme","user_id":"u-42","occurred_at":"2026-04-30T09:00:00.123Z"}`,
		`{"event_id":"e","tenant_id":"t","occurred_at":"9999-12-31T23:59:59Z"}`,
		`{"event_id":"e","tenant_id":"t","occurred_at":"0001-01-01T00:00:00Z"}`,
		`{"event_id":"e","tenant_id":"t","Tenant_id":"u"}`,
		`{"event_id":"x\ud800","tenant_id":"t"}`,
		`{"event_id":"\u0000","tenant_id":"t"}`, `[]`, `null`, "\xff\xfe", `{}`,
	} {
		f.Add([]byte(s), int64(1777539600000))
	}
	f.Fuzz(func(t *testing.T, value []byte, recordMillis int64) {
		rt := time.Time{}
		if recordMillis > 0 {
			rt = time.UnixMilli(recordMillis)
		}
		ev, err := dec.Decode(value, rt)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Error() == "" || e.Class == "" {
				t.Fatalf("error %v is not a described, classified *Error", err)
			}
			return
		}
		for _, id := range []string{ev.ID, ev.Tenant} {
			if id == "" || len(id) > 128 || strings.ContainsRune(id, '#') || !utf8.ValidString(id) {
				t.Fatalf("accepted id %q", id)
			}
		}
		if !rt.IsZero() && ev.Base.After(rt.Add(dec.MaxClockSkew)) {
			t.Fatalf("base %s beyond the skew bound of record time %s", ev.Base, rt)
		}
		if ev.Base.UnixMilli() > 9_999_999_999_999 {
			t.Fatalf("base %s past what a row key holds", ev.Base)
		}
		again, err := dec.Decode(value, rt)
		if err != nil || again != ev {
			t.Fatalf("decoding the same record twice: %+v then %+v, %v", ev, again, err)
		}
		// Whatever is accepted reads the same to other programs.
		var d downstream
		if err := json.Unmarshal(value, &d); err != nil {
			t.Fatalf("accepted an event encoding/json cannot read into a struct: %v", err)
		}
		if d.EventID != ev.ID || d.TenantID != ev.Tenant || d.UserID != ev.User {
			t.Fatalf("ids differ: ours %q/%q/%q, encoding/json %q/%q/%q", ev.ID, ev.Tenant, ev.User, d.EventID, d.TenantID, d.UserID)
		}
		if d.OccurredAt != "" && !ev.Clamped {
			if tt, ok := parseRFC3339(d.OccurredAt); !ok || !tt.Equal(ev.Base) {
				t.Fatalf("occurred_at %q read by others as %v, by us as %v", d.OccurredAt, tt, ev.Base)
			}
		}
	})
}

// rfc3339 is the grammar of RFC 3339's date-time (section 5.6), "T" and
// "Z" in either case.
var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$`)

// parseRFC3339 accepts only the RFC's grammar, and agrees with time.Parse
// on every string of that grammar time.Parse accepts (time.Parse also takes
// some that are not, such as a one-digit hour).
func FuzzRFC3339(f *testing.F) {
	for _, s := range []string{"2026-04-30T09:00:00.123Z", "2026-04-30T10:00:00+02:00", "1969-07-20T20:17:40.5-00:30", "2016-12-31T23:59:60Z", "2026-04-30t09:00:00z", "0000-01-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseRFC3339(s)
		if ok && !rfc3339.MatchString(s) {
			t.Fatalf("%q accepted outside the grammar", s)
		}
		if ok && got.Location() != time.UTC {
			t.Fatalf("%q: not UTC", s)
		}
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !rfc3339.MatchString(s) {
			return
		}
		if ok && !got.Equal(want) {
			t.Fatalf("%q: time.Parse %v, ours %v", s, want, got)
		}
		// time.Parse takes offsets the RFC does not (minutes past 59).
		if z := s[len(s)-6:]; !ok && (z[0] == '+' || z[0] == '-') && z[1:3] <= "23" && z[4:6] <= "59" {
			t.Fatalf("%q: time.Parse %v, ours refused", s, want)
		}
	})
}

// The scanner agrees with encoding/json on every valid object: same string
// fields, same verdict on their types; where it finds a field twice (also
// under case folding) it says so rather than pick one.
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
		var got fields
		perr := parse(v, contract.root, &got)
		if (perr != errSyntax) != json.Valid(v) {
			t.Fatalf("parse says valid=%t, json.Valid %t (%v)", perr != errSyntax, json.Valid(v), perr)
		}
		var m map[string]any
		if json.Unmarshal(v, &m) != nil || m == nil {
			return
		}
		if err := perr; err != nil {
			// Valid JSON refused only as ambiguous: a field twice, or a key
			// that folds to a field's name.
			if got.err == nil {
				t.Fatalf("scan of a valid object: %v", err)
			}
			return
		}
		for name, fl := range map[string]field{"event_id": got.f[fieldEventID], "tenant_id": got.f[fieldTenant], "user_id": got.f[fieldUser], "occurred_at": got.f[fieldTime]} {
			want, present := m[name]
			if fl.present != present {
				t.Fatalf("%s: present %t, encoding/json %t", name, fl.present, present)
			}
			switch w := want.(type) {
			case string:
				if !utf8.ValidString(fl.s) || fl.escape != "" {
					// encoding/json swaps invalid bytes and lone surrogates
					// for U+FFFD; the scanner flags them, and the decoder
					// refuses them.
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
	if n := testing.AllocsPerRun(200, func() { _, _ = dec.Decode(v, recordTime) }); n != 0 {
		t.Errorf("Decode allocates %v times per event, want 0", n)
	}
}
