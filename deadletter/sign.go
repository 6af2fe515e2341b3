package deadletter

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/keyfile"
)

// HeaderSignature authenticates a letter: "v2:<key id>:<base64 HMAC>", an
// HMAC-SHA-256 under the worker's letter key of the topic it was produced
// to, every other header (HeaderPlaced, when the worker placed it, among
// them), the key and the value, as produced. A letter whose signature does
// not verify was not written by a worker holding the key (or was changed
// since, or copied into another topic), and worker redrive does not trust
// it. An earlier release signed "v1", without the topic: such a letter is
// not trusted either.
const HeaderSignature = "cellttl.signature"

// HeaderOriginalHMAC stands for the original value's SHA-256 in a letter
// without its payload, when letters are signed: "v1:<key id>:<base64
// HMAC>" of that digest, under the letter key. A plain digest of a short
// value is a dictionary away from the value; a letter without payload
// keeps none (and without a key, no hash at all).
const HeaderOriginalHMAC = "cellttl.original.hmac"

// HeaderProducerPrefix renames a record's own cellttl.* headers in its
// letter: the names cellttl.* are the worker's, and a record carrying one
// (cellttl.source.timestamp, cellttl.reason.class...) must never pass as
// the worker's word. Its cellttl.reason becomes
// cellttl.producer.cellttl.reason, which no worker header starts with.
const HeaderProducerPrefix = "cellttl.producer."

// keyIDLen is the hex length of a key id: the first 8 bytes of a SHA-256
// of the key, enough to tell a handful of keys apart, nothing to guess
// the key from.
const keyIDLen = 16

// signatureBytes bounds the signature header's size in a letter, as
// messageSize counts it: room kept for it when a letter is cut to fit.
const signatureBytes = int64(5 + len(HeaderSignature) + 5 + len("v2::") + keyIDLen + 44)

// Keys are the letter keys: the first signs, every one verifies, so that a
// key can rotate while letters signed with the one before are still kept.
type Keys struct {
	keys []letterKey
}

type letterKey struct {
	id  string
	key []byte
}

// Errors of Verify.
var (
	ErrUnsigned     = errors.New("the letter has no signature")
	ErrOldSignature = errors.New("the letter's signature is an earlier release's (v1), which covers neither its topic nor when it was placed")
	ErrBadSignature = errors.New("the letter's signature does not verify")
	ErrUnknownKey   = errors.New("the letter is signed with a key not given")
)

// LoadKeys reads a key file (internal/keyfile: one base64 key of at least
// 32 bytes a line). The first key signs.
func LoadKeys(path string) (*Keys, error) {
	raw, err := keyfile.Read(path, "letter key file")
	if err != nil {
		return nil, err
	}
	k := &Keys{}
	for _, key := range raw {
		k.keys = append(k.keys, letterKey{id: keyID(key), key: key})
	}
	return k, nil
}

func keyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("cellttl letter key id\x00"), key...))
	return hex.EncodeToString(sum[:])[:keyIDLen]
}

// ID is the id of the key that signs.
func (k *Keys) ID() string { return k.keys[0].id }

// sign is the signature header's value for a letter of these headers, key
// and value, produced to topic, under the first key.
func (k *Keys) sign(topic string, headers []signed, key, value []byte) []byte {
	mac := hmac.New(sha256.New, k.keys[0].key)
	digest(mac, topic, headers, key, value)
	return k.stamp("v2", mac.Sum(nil))
}

// stamp is "<version>:<the signing key's id>:<base64 sum>".
func (k *Keys) stamp(version string, sum []byte) []byte {
	out := append([]byte(version+":"+k.keys[0].id+":"), make([]byte, base64.StdEncoding.EncodedLen(len(sum)))...)
	base64.StdEncoding.Encode(out[len(out)-base64.StdEncoding.EncodedLen(len(sum)):], sum)
	return out
}

// originalMAC is HeaderOriginalHMAC's value for a value of this SHA-256.
func (k *Keys) originalMAC(sum [sha256.Size]byte) []byte {
	return k.stamp("v1", originalSum(k.keys[0].key, sum))
}

func originalSum(key []byte, sum [sha256.Size]byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("cellttl original value\x00"))
	mac.Write(sum[:])
	return mac.Sum(nil)
}

// VerifyOriginal reports whether a HeaderOriginalHMAC value stands for a
// value of this SHA-256, under any of the keys.
func (k *Keys) VerifyOriginal(header string, sum [sha256.Size]byte) bool {
	version, rest, _ := strings.Cut(header, ":")
	id, b64, _ := strings.Cut(rest, ":")
	want, err := base64.StdEncoding.DecodeString(b64)
	if version != "v1" || err != nil {
		return false
	}
	for _, lk := range k.keys {
		if lk.id == id {
			return hmac.Equal(originalSum(lk.key, sum), want)
		}
	}
	return false
}

// Verify checks a letter as read from its topic: its signature header,
// over the rest as it was produced.
func (k *Keys) Verify(m ingest.Message) error {
	var sig []byte
	var found int
	hs := make([]signed, 0, len(m.Headers))
	for _, h := range m.Headers {
		if h.Key == HeaderSignature {
			sig, found = h.Value, found+1
			continue
		}
		hs = append(hs, signed{h.Key, h.Value})
	}
	switch {
	case found == 0:
		return ErrUnsigned
	case found > 1:
		return ErrBadSignature
	}
	version, rest, _ := strings.Cut(string(sig), ":")
	id, b64, _ := strings.Cut(rest, ":")
	want, err := base64.StdEncoding.DecodeString(b64)
	switch {
	case version == "v1" && err == nil:
		return ErrOldSignature
	case version != "v2" || err != nil:
		return ErrBadSignature
	}
	for _, lk := range k.keys {
		if lk.id != id {
			continue
		}
		mac := hmac.New(sha256.New, lk.key)
		digest(mac, m.Topic, hs, m.Key, m.Value)
		if !hmac.Equal(mac.Sum(nil), want) {
			return ErrBadSignature
		}
		return nil
	}
	return fmt.Errorf("%w (key id %q)", ErrUnknownKey, id)
}

// signed is a letter header in the form both the writer and the reader
// have.
type signed struct {
	key   string
	value []byte
}

// digest writes the letter unambiguously: each part with its length.
// Null and empty are one: Kafka clients do not all keep them apart.
func digest(h hash.Hash, topic string, headers []signed, key, value []byte) {
	var n [8]byte
	part := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	part([]byte(topic))
	binary.BigEndian.PutUint64(n[:], uint64(len(headers)))
	h.Write(n[:])
	for _, hd := range headers {
		part([]byte(hd.key))
		part(hd.value)
	}
	part(key)
	part(value)
}
