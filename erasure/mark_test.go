package erasure

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A mark erases the records below it, of its own topic only, whatever
// time they carry; a user erased twice keeps what both marks cover.
func TestMarkErasesByOffset(t *testing.T) {
	ms := t0.UnixMilli()
	first := &Mark{Topic: "clicks", Ends: []int64{10, 20}}
	l := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0, Below: first}}, t0)
	late := ms + int64(time.Hour/time.Millisecond) // stamped an hour past erased_up_to
	for _, c := range []struct {
		p    Position
		want bool
	}{
		{Position{Topic: "clicks", Partition: 0, Offset: 9}, true},
		{Position{Topic: "clicks", Partition: 0, Offset: 10}, false}, // appended after the erasure
		{Position{Topic: "clicks", Partition: 1, Offset: 19}, true},
		{Position{Topic: "clicks", Partition: 2, Offset: 0}, false},  // a partition added since
		{Position{Topic: "clicks", Partition: -1, Offset: 0}, false}, // no partition
		{Position{Topic: "views", Partition: 0, Offset: 0}, false},   // another topic's records
		{Position{}, false}, // a row whose record is not known
	} {
		if got := l.Erased("acme", "u1", late, c.p); got != c.want {
			t.Errorf("Erased(stamped ahead, %+v) = %t, want %t", c.p, got, c.want)
		}
		if !l.Erased("acme", "u1", ms, c.p) {
			t.Errorf("Erased(at erased_up_to, %+v) = false: time still erases", c.p)
		}
	}
	if l.Erased("acme", "u2", ms, Position{Topic: "clicks", Partition: 0, Offset: 0}) {
		t.Error("a mark erased another user")
	}
	// Erased again, with the topic created again (its ends smaller on one
	// partition) and a partition added: the union of both.
	second := &Mark{Topic: "clicks", Ends: []int64{3, 25, 7}}
	l2, grew := l.with([]entry{{tenant: "acme", user: "u1", erased: erased{upTo: ms - 1, below: second, expires: forever}}}, t0)
	if l2 == l || !l2.newer(l) || !grew {
		t.Fatal("a wider mark is nothing new to the ledger")
	}
	for _, p := range []Position{{Topic: "clicks", Partition: 0, Offset: 9}, {Topic: "clicks", Partition: 1, Offset: 24}, {Topic: "clicks", Partition: 2, Offset: 6}} {
		if !l2.Erased("acme", "u1", late, p) {
			t.Errorf("after a second erasure, %+v is not erased", p)
		}
	}
	if l3, _ := l.with([]entry{{tenant: "acme", user: "u1", erased: erased{upTo: ms, below: &Mark{Topic: "clicks", Ends: []int64{5}}, expires: forever}}}, t0); l3 != l {
		t.Error("a mark the first contains made a new ledger")
	}
}

// A mark names the topic's incarnation its offsets are of. Read on that
// incarnation it covers by offsets; on another (the topic created again, a
// mirror after a failover) it covers every record of the topic, offsets
// meaning nothing there; by a reader that knows no id, by offsets. Two
// incarnations' marks of one user cover all of either; a mark without an
// id, of a broker that gave none, joins one with.
func TestMarkNamesItsIncarnation(t *testing.T) {
	ms := t0.UnixMilli()
	late := ms + int64(time.Hour/time.Millisecond)
	old := &Mark{Topic: "clicks", TopicID: "AAAAAAAAAAAAAAAAAAAAAA", Ends: []int64{10}}
	l := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0, Below: old}}, t0)
	above := Position{Topic: "clicks", Partition: 0, Offset: 50} // past the ends
	if l.Erased("acme", "u1", late, above) {
		t.Error("a reader that knows no id: a record past the ends is erased")
	}
	l.ids = map[string]string{"clicks": "AAAAAAAAAAAAAAAAAAAAAA"}
	if l.Erased("acme", "u1", late, above) || !l.Erased("acme", "u1", late, Position{Topic: "clicks", Partition: 0, Offset: 9}) {
		t.Error("on the mark's incarnation, not by offsets")
	}
	l.ids = map[string]string{"clicks": "BBBBBBBBBBBBBBBBBBBBBB"}
	if !l.Erased("acme", "u1", late, above) || l.Erased("acme", "u1", late, Position{Topic: "views", Partition: 0, Offset: 0}) {
		t.Error("on another incarnation, not every record of the topic (and only of it)")
	}
	// A record that says its incarnation (a letter's) is held to it, not
	// to the reader's: a letter of the old topic, redriven by a reader of
	// the new one, against a mark of the new one.
	l.ids = map[string]string{"clicks": "BBBBBBBBBBBBBBBBBBBBBB"}
	newMark := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0, Below: &Mark{Topic: "clicks", TopicID: "BBBBBBBBBBBBBBBBBBBBBB", Ends: []int64{3}}}}, t0)
	newMark.ids = l.ids
	ofOld := Position{Topic: "clicks", TopicID: "AAAAAAAAAAAAAAAAAAAAAA", Partition: 0, Offset: 50}
	if !newMark.Erased("acme", "u1", late, ofOld) || newMark.Erased("acme", "u1", late, Position{Topic: "clicks", Partition: 0, Offset: 50}) {
		t.Error("a letter of another incarnation than the mark's is not held to its own")
	}
	newer := &Mark{Topic: "clicks", TopicID: "BBBBBBBBBBBBBBBBBBBBBB", Ends: []int64{3}}
	both := union(old, newer)
	if !both.contains(old) || !both.contains(newer) || !both.covers(above, "AAAAAAAAAAAAAAAAAAAAAA") || !both.covers(above, "BBBBBBBBBBBBBBBBBBBBBB") {
		t.Errorf("the union of two incarnations' marks %+v does not cover all of either", both)
	}
	if newer.contains(old) || old.contains(newer) {
		t.Error("a mark of one incarnation contains another's")
	}
	bare := &Mark{Topic: "clicks", Ends: []int64{20}}
	if j := union(bare, old); j.TopicID != old.TopicID || j.Ends[0] != 20 || bare.contains(old) || !j.contains(bare) || !j.contains(old) {
		t.Errorf("a mark without an id joined with one: %+v", j)
	}
	for _, m := range []*Mark{old, bare} {
		got, err := decodeMark(m.encode())
		if err != nil || got.TopicID != m.TopicID || !slices.Equal(got.Ends, m.Ends) || (m.TopicID == "") != (m.encode()[0] == markVersion) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
	}
	if _, err := decodeMark((&Mark{Topic: "clicks", TopicID: anyIncarnation, Ends: []int64{1}}).encode()); err == nil {
		t.Error("a stored mark claims every incarnation")
	}
}

// A mark comes back from its encoding; bytes that are not one are refused,
// and never make a decoder allocate what they claim.
func TestMarkEncoding(t *testing.T) {
	for _, m := range []*Mark{{Topic: "clicks", Ends: []int64{0, 1, 1 << 40}}, {Topic: "", Ends: nil}, {Topic: "t", Ends: []int64{}}} {
		got, err := decodeMark(m.encode())
		if err != nil || got.Topic != m.Topic || !slices.Equal(got.Ends, m.Ends) && len(got.Ends)+len(m.Ends) > 0 {
			t.Errorf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
	}
	for _, b := range [][]byte{nil, {0}, {2, 0, 0}, {1, 5, 'a'}, {1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, append((&Mark{Topic: "t", Ends: []int64{1}}).encode(), 0)} {
		if m, err := decodeMark(b); err == nil {
			t.Errorf("decodeMark(%x) = %+v, want an error", b, m)
		}
	}
}

func FuzzDecodeMark(f *testing.F) {
	f.Add((&Mark{Topic: "clicks", Ends: []int64{1, 2, 3}}).encode())
	f.Add((&Mark{Topic: "clicks", TopicID: "Z8HTRmW6QsSH9oxxqsoWYA", Ends: []int64{1, 2, 3}}).encode())
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMark(b)
		if err != nil {
			return
		}
		if again, err := decodeMark(m.encode()); err != nil || again.Topic != m.Topic || !slices.Equal(again.Ends, m.Ends) {
			t.Fatalf("%x: decoded %+v, again %+v %v", b, m, again, err)
		}
	})
}

// A record written again with its mark (as forget does once it has read
// the end offsets) comes back with it, from a full read, from the journal
// and from the expiry index, and the marks of one forget are held once.
func TestStoreKeepsMarks(t *testing.T) {
	dc, ac := testenv.Clients(t)
	ctx := context.Background()
	name := testenv.Name("ledger")
	s := NewStore(dc, name)
	createLedger(t, ac, name)
	now := time.Now().UTC().Truncate(time.Millisecond)
	mark := &Mark{Topic: "clicks", Ends: []int64{4, 8}}
	for _, u := range []string{"u1", "u2"} {
		r := Erasure{Tenant: "acme", User: u, UpTo: now, RecordedAt: now, RequestedBy: "ticket-1"}
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.Below = mark
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	late := now.Add(time.Hour).UnixMilli()
	at := Position{Topic: "clicks", Partition: 1, Offset: 7}
	got, err := s.loadAll(ctx, now)
	l := got.l
	if err != nil || l.Len() != 2 || !l.Erased("acme", "u1", late, at) || l.Erased("acme", "u1", late, Position{Topic: "clicks", Partition: 1, Offset: 8}) {
		t.Fatalf("full read: %v, %d users, the mark not obeyed", err, l.Len())
	}
	if l.users["acme"]["u1"].below != l.users["acme"]["u2"].below {
		t.Error("the users of one forget hold a mark each")
	}
	// A journal row per write, keyed by the millisecond it was written:
	// each record, then each again with its mark (or, written within the
	// same millisecond, the one row with the mark's cells the newest).
	entries, _, _, _, err := s.loadSince(ctx, now.Add(-time.Minute), now)
	if err != nil || len(entries) < 2 || len(entries) > 4 {
		t.Fatalf("journal: %v %+v", err, entries)
	}
	for _, u := range []string{"u1", "u2"} {
		if !slices.ContainsFunc(entries, func(e entry) bool { return e.user == u && e.below != nil }) {
			t.Errorf("the journal lost %s's mark: %+v", u, entries)
		}
	}
	if j, _ := (&Ledger{}).with(entries, now); !j.Erased("acme", "u2", late, at) {
		t.Error("the journal lost the mark")
	}
	idx, err := s.loadInForce(ctx, now)
	if err != nil || idx.l.Len() != 2 || !idx.l.Erased("acme", "u1", late, at) || idx.rows != 2 {
		t.Errorf("expiry index: %v, %d users of %d records", err, idx.l.Len(), idx.rows)
	}
	recs, _, err := s.Load(ctx, now)
	if err != nil || len(recs) != 2 || recs[0].Below == nil || !slices.Equal(recs[0].Below.Ends, mark.Ends) {
		t.Errorf("records: %v %+v", err, recs)
	}
}

// A letter of an erased user is dropped; one whose user was not read
// loses its payload where an erasure could cover it (its tenant's, or any
// when its tenant was not read either); every other keeps it.
func TestLetterFate(t *testing.T) {
	ms := t0.UnixMilli()
	l := NewLedger([]Erasure{{Tenant: "acme", User: "u1", UpTo: t0, Below: &Mark{Topic: "clicks", Ends: []int64{10}}}}, t0)
	for _, c := range []struct {
		s    Subject
		want LetterFate
	}{
		{Subject{Tenant: "acme", User: "u1", UserRead: true, Millis: ms}, DropLetter},
		{Subject{Tenant: "acme", User: "u1", UserRead: true, Millis: ms + 1, At: Position{Topic: "clicks", Partition: 0, Offset: 9}}, DropLetter},
		{Subject{Tenant: "acme", User: "u1", UserRead: true, Millis: ms + 1, At: Position{Topic: "clicks", Partition: 0, Offset: 10}}, KeepLetter},
		{Subject{Tenant: "acme", User: "u2", UserRead: true, Millis: ms}, KeepLetter},
		{Subject{Tenant: "acme", UserRead: true, Millis: ms}, KeepLetter}, // an event without a user
		{Subject{Tenant: "acme", Millis: ms}, LetterWithoutPayload},
		{Subject{Millis: ms}, LetterWithoutPayload},
		{Subject{Tenant: "globex", Millis: ms}, KeepLetter},
	} {
		if got := l.Letter(c.s); got != c.want {
			t.Errorf("Letter(%+v) = %d, want %d", c.s, got, c.want)
		}
	}
	if (*Ledger)(nil).Letter(Subject{}) != KeepLetter {
		t.Error("no ledger: a letter lost its payload")
	}
}
