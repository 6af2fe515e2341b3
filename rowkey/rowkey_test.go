package rowkey

import (
	"fmt"
	"strings"
	"testing"
)

func TestBuildParse(t *testing.T) {
	key := string(Build(nil, "acme", "u-42", "e-1", 1777539600123))
	if !strings.HasPrefix(key, "acme#") || !strings.HasSuffix(key, "#e-1") {
		t.Errorf("key %q must begin with the tenant and end with the event id", key)
	}
	if !strings.HasPrefix(key, UserPrefix("acme", "u-42")) {
		t.Errorf("key %q lacks the user prefix %q", key, UserPrefix("acme", "u-42"))
	}
	p, err := Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	if p != (Parts{Tenant: "acme", User: "u-42", EventID: "e-1", Millis: 1777539600123}) {
		t.Errorf("Parse = %+v", p)
	}
}

// One user's keys sort by event time, so a prefix scan reads them in order.
func TestUserKeysSortByTime(t *testing.T) {
	prev := ""
	for _, ms := range []int64{0, 9, 10, 999, 1000, 1777539600123, 9999999999999} {
		k := string(Build(nil, "t", "u", "e", ms))
		if k <= prev {
			t.Errorf("key for %d (%q) does not sort after %q", ms, k, prev)
		}
		if k < UserTimeKey("t", "u", ms) || (ms > 0 && k < UserTimeKey("t", "u", ms-1)) {
			t.Errorf("UserTimeKey bound wrong at %d", ms)
		}
		prev = k
	}
}

// Keys of one tenant spread over the buckets: no bucket gets more than
// twice its share.
func TestBucketsSpread(t *testing.T) {
	const n, buckets = 160000, 16
	count := map[byte]int{}
	for i := range n {
		k := Build(nil, "acme", fmt.Sprintf("user-%d", i), "e", 1)
		count[k[len("acme#")]]++ // first hex digit of the bucket
	}
	for b, c := range count {
		if c > 2*n/buckets || c < n/buckets/2 {
			t.Errorf("bucket %c has %d of %d keys", b, c, n)
		}
	}
	if len(count) != buckets {
		t.Errorf("%d first digits used, want %d", len(count), buckets)
	}
}

func TestEventsWithoutUserSpread(t *testing.T) {
	a := string(Build(nil, "t", "", "e-1", 5))
	b := string(Build(nil, "t", "", "e-2", 5))
	if a[:7] == b[:7] {
		t.Errorf("events without a user share bucket: %q %q", a, b)
	}
}

func TestValidateID(t *testing.T) {
	for _, bad := range []string{"", "a#b", "a\nb", "a\x7fb", "\xff", strings.Repeat("x", 129), "a\u0085b"} {
		if err := ValidateID("f", bad); err == nil || !strings.HasPrefix(err.Error(), "f ") {
			t.Errorf("ValidateID(%q) = %v", bad, err)
		}
	}
	for _, good := range []string{"a", "e-1", "ümlaut", "a b", strings.Repeat("x", 128)} {
		if err := ValidateID("f", good); err != nil {
			t.Errorf("ValidateID(%q) = %v", good, err)
		}
	}
}

func TestBuildAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = Build(buf[:0], "acme", "u-42", "e-1", 1777539600123) }); n != 0 {
		t.Errorf("Build into a big enough buffer allocates %v times", n)
	}
}

func TestKeyAllocatesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	if k := Key("acme", "u-42", "e-1", 1777539600123); k != string(Build(nil, "acme", "u-42", "e-1", 1777539600123)) {
		t.Errorf("Key = %q", k)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Key("acme", "u-42", "e-1", 1777539600123) }); n != 1 {
		t.Errorf("Key allocates %v times, want 1", n)
	}
}

// The end of a prefix's range lies after every key with the prefix and
// before every key after them.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{"acme#", "acme$"}, {"a\xff", "b"}, {"\xff\xff", ""}, {"", ""},
	} {
		if got := PrefixEnd(c.prefix); got != c.want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	key := Key("acme", "u", "e", 1)
	if end := PrefixEnd(TenantPrefix("acme")); !(key < end) || !(end <= TenantPrefix("acmf")) {
		t.Errorf("%q is not after %q and before acmf's keys", end, key)
	}
}

// Describe and Position name a row and a scan's progress without the ids
// the key holds.
func TestDescribeAndPositionHoldNoIDs(t *testing.T) {
	key := Key("acme", "user-4711", "event-99", 1_795_000_000_000)
	for _, s := range []string{Describe(key), Position(key)} {
		if strings.Contains(s, "user-4711") || strings.Contains(s, "event-99") {
			t.Errorf("%q holds an id of %q", s, key)
		}
	}
	// Nothing of the ids, not even a hash: a row of another user at the
	// same time, in the same bucket, reads the same.
	d := Describe(key)
	if want := "row of tenant acme in bucket " + Position(key)[5:9] + " at 2026-11-18T11:06:40.000Z"; d != want {
		t.Errorf("Describe %q, want %q", d, want)
	}
	if f := Describe("bob@example.com#x"); strings.Contains(f, "bob") || !strings.Contains(f, "17 bytes") {
		t.Errorf("Describe of a key not in the layout: %q", f)
	}
	p := Position(key)
	if !strings.HasPrefix(key, p) || strings.Count(p, "#") != 2 || !strings.HasPrefix(p, "acme#") {
		t.Errorf("Position %q of %q: want the tenant and bucket, a prefix of the key", p, key)
	}
	if Position("foreign") != "" || Position("acme#x") != "acme#" || Position("acme#bob@example.com#1") != "acme#" {
		t.Errorf("positions of keys outside the layout: %q, %q, %q", Position("foreign"), Position("acme#x"), Position("acme#bob@example.com#1"))
	}
}
