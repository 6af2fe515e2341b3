package deadletter

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest"
)

func keyFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

// asRead is the letter as worker redrive reads it back.
func asRead(m kafka.Message) ingest.Message {
	r := ingest.Message{Topic: m.Topic, Key: m.Key, Value: m.Value}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, ingest.Header{Key: h.Key, Value: h.Value})
	}
	return r
}

// A signed letter verifies under its key, and under a key file that has
// rotated to a new key with the old one kept; any change to a header (when
// it was placed among them), the key or the value, a copy into another
// topic, a second signature, or another key fails it; an earlier release's
// signature, which covered neither topic nor placement, is not taken.
func TestLettersAreSigned(t *testing.T) {
	old, err := LoadKeys(keyFile(t, "# old", b64(1)))
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := LoadKeys(keyFile(t, b64(2), "", b64(1)))
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadKeys(keyFile(t, b64(3)))
	if err != nil {
		t.Fatal(err)
	}
	if old.ID() == other.ID() || rotated.ID() == old.ID() || len(old.ID()) != keyIDLen {
		t.Fatalf("key ids %q %q %q", old.ID(), rotated.ID(), other.ID())
	}
	w := &Writer{keys: old}
	dl := Letter{Msg: ingest.Message{Topic: "clicks", Partition: 1, Offset: 7, Key: []byte("k"), Value: []byte(`{"event_id":"e"}`),
		Headers: []ingest.Header{{Key: "x-trace", Value: []byte("t")}}, Time: time.UnixMilli(1_800_000_000_000)},
		Reason: "tenant newco is not listed", Class: "unlisted_tenant"}
	placed := time.UnixMilli(1_800_000_100_000)
	m, _ := w.letter(dl, "clicks.dlq", placed, 1<<20, true)
	good := asRead(m)
	if got, _ := header(m, HeaderPlaced); got != "2027-01-15T08:01:40.000Z" {
		t.Errorf("placed %q, want the time it was placed", got)
	}
	for _, k := range []*Keys{old, rotated} {
		if err := k.Verify(good); err != nil {
			t.Errorf("a letter signed with %s, verified with a file of %s first: %v", old.ID(), k.ID(), err)
		}
	}
	if err := other.Verify(good); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("another key: %v", err)
	}
	tamper := map[string]func(m *ingest.Message){
		"value":    func(m *ingest.Message) { m.Value = append([]byte(nil), `{"event_id":"f"}`...) },
		"key":      func(m *ingest.Message) { m.Key = []byte("j") },
		"a header": func(m *ingest.Message) { m.Headers[0].Value = []byte("u") },
		"a header added": func(m *ingest.Message) {
			m.Headers = append(m.Headers, ingest.Header{Key: HeaderReasonClass, Value: []byte("not_json")})
		},
		"a header gone":  func(m *ingest.Message) { m.Headers = m.Headers[1:] },
		"two signatures": func(m *ingest.Message) { m.Headers = append(m.Headers, m.Headers[len(m.Headers)-1]) },
		"the signature":  func(m *ingest.Message) { m.Headers[len(m.Headers)-1].Value = []byte("v2:" + old.ID() + ":AAAA") },
		"the topic":      func(m *ingest.Message) { m.Topic = "clicks.dlq.30d" },
		"when placed": func(m *ingest.Message) {
			for i := range m.Headers {
				if m.Headers[i].Key == HeaderPlaced {
					m.Headers[i].Value = []byte("2037-01-15T08:01:40.000Z")
				}
			}
		},
	}
	for name, change := range tamper {
		m := asRead(m)
		change(&m)
		if err := old.Verify(m); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s changed: %v, want ErrBadSignature", name, err)
		}
	}
	unsigned, _ := (&Writer{}).letter(dl, "clicks.dlq", placed, 1<<20, true)
	if err := old.Verify(asRead(unsigned)); !errors.Is(err, ErrUnsigned) {
		t.Errorf("an unsigned letter: %v", err)
	}
	v1 := asRead(m)
	v1.Headers[len(v1.Headers)-1].Value = []byte("v1:" + old.ID() + ":AAAA")
	if err := old.Verify(v1); !errors.Is(err, ErrOldSignature) {
		t.Errorf("an earlier release's signature: %v", err)
	}
}

// Cut to fit, a signed letter keeps room for its signature: at the edge
// it fits the topic's limit, and verifies.
func TestSignedLetterFitsAtTheEdge(t *testing.T) {
	keys, err := LoadKeys(keyFile(t, b64(1)))
	if err != nil {
		t.Fatal(err)
	}
	const max = 2000
	dl := Letter{Msg: ingest.Message{Topic: "clicks", Value: bytes.Repeat([]byte("v"), 5000)}, Reason: "too large", Class: "too_large"}
	m, truncated := (&Writer{keys: keys}).letter(dl, "clicks.dlq", time.Now(), max, true)
	if !truncated || messageSize(m) > max {
		t.Errorf("truncated %t, %d bytes against a limit of %d", truncated, messageSize(m), max)
	}
	if err := keys.Verify(asRead(m)); err != nil {
		t.Errorf("the cut letter: %v", err)
	}
}

// The record's own cellttl.* headers never pass as the worker's: the letter
// keeps them renamed, and the worker's come with their own values.
func TestRecordHeadersNamedLikeOursAreRenamed(t *testing.T) {
	dl := Letter{Msg: ingest.Message{Topic: "clicks", Value: []byte("v"), Time: time.UnixMilli(1_800_000_000_000),
		Headers: []ingest.Header{{Key: HeaderSourceTimestamp, Value: []byte("2286-11-18T00:00:00Z")}, {Key: HeaderReasonClass, Value: []byte("bigtable_refused")}, {Key: "x", Value: []byte("y")}}},
		Reason: "r", Class: "unlisted_tenant"}
	m, _ := letterMessage(dl, 1<<20, true)
	seen := map[string][]string{}
	for _, h := range m.Headers {
		seen[h.Key] = append(seen[h.Key], string(h.Value))
	}
	if got := seen[HeaderSourceTimestamp]; len(got) != 1 || got[0] != "2027-01-15T08:00:00Z" {
		t.Errorf("%s: %q, want the record's own time alone", HeaderSourceTimestamp, got)
	}
	if got := seen[HeaderReasonClass]; len(got) != 1 || got[0] != "unlisted_tenant" {
		t.Errorf("%s: %q, want the worker's alone", HeaderReasonClass, got)
	}
	if got := seen[HeaderProducerPrefix+HeaderSourceTimestamp]; len(got) != 1 || got[0] != "2286-11-18T00:00:00Z" {
		t.Errorf("the record's own header, renamed: %q", got)
	}
	if got := seen["x"]; len(got) != 1 {
		t.Errorf("the record's other header: %q", got)
	}
}

// A letter without its payload keeps no plain digest of the value, which
// a dictionary of short values would undo: signed, it keeps a keyed one,
// which only the keys' holders can check a record against; unsigned, none.
// A letter cut to fit keeps its digest: its first bytes are there anyway.
func TestLetterWithoutPayloadKeepsNoPlainDigest(t *testing.T) {
	keys, err := LoadKeys(keyFile(t, b64(1)))
	if err != nil {
		t.Fatal(err)
	}
	value := []byte(`{"event_id":"e","user_id":"alice"}`)
	sum := sha256.Sum256(value)
	dl := Letter{Msg: ingest.Message{Topic: "clicks", Value: value}, Reason: "r", Class: "not_json"}
	for _, w := range []*Writer{{keys: keys}, {}} {
		m, _ := w.letter(dl, "clicks.dlq", time.Now(), 1<<20, false)
		if v, ok := header(m, HeaderOriginalSHA256); ok {
			t.Errorf("signed %t: a plain digest %s", w.keys != nil, v)
		}
		mac, ok := header(m, HeaderOriginalHMAC)
		if ok != (w.keys != nil) || (ok && (!keys.VerifyOriginal(mac, sum) || keys.VerifyOriginal(mac, sha256.Sum256([]byte("other"))))) {
			t.Errorf("signed %t: keyed digest %q (%t)", w.keys != nil, mac, ok)
		}
		if w.keys != nil && keys.Verify(asRead(m)) != nil {
			t.Error("the signed letter without payload does not verify")
		}
	}
	cut := Letter{Msg: ingest.Message{Topic: "clicks", Value: bytes.Repeat([]byte("v"), 5000)}, Reason: "too large", Class: "too_large"}
	m, truncated := (&Writer{keys: keys}).letter(cut, "clicks.dlq", time.Now(), 2000, true)
	if v, _ := header(m, HeaderOriginalSHA256); !truncated || len(v) != 64 {
		t.Errorf("a letter cut to fit: digest %q", v)
	}
}
