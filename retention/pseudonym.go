package retention

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/cellttl/cellttl/internal/keyfile"
)

// Pseudonyms name users in logs and errors without their ids. A plain
// hash of an id is no pseudonym: ids are enumerable (u-1, u-2..., emails),
// and a 48-bit SHA-256 prefix of one is reversed in seconds. With a key
// (--log-pseudonym-key-file), a user is named by an HMAC of tenant and id
// under it: the same for the same user, so that an operator holding the
// key and the id can find the user's lines, and nothing to anyone without
// the key. Without a key, logs name no user at all.
type Pseudonyms struct {
	key []byte
}

// LoadPseudonyms reads the key file (internal/keyfile); the first key is
// used.
func LoadPseudonyms(path string) (*Pseudonyms, error) {
	keys, err := keyfile.Read(path, "pseudonym key file")
	if err != nil {
		return nil, err
	}
	return &Pseudonyms{key: keys[0]}, nil
}

// Ref names a user of a tenant: "user hmac:<12 hex> of tenant acme", the
// first 6 bytes of HMAC-SHA-256(key, tenant NUL user); with no key (a nil
// Pseudonyms), "a user of tenant acme".
func (p *Pseudonyms) Ref(tenant, user string) string {
	if p == nil {
		return "a user of tenant " + tenant
	}
	mac := hmac.New(sha256.New, p.key)
	mac.Write([]byte(tenant))
	mac.Write([]byte{0})
	mac.Write([]byte(user))
	return "user hmac:" + hex.EncodeToString(mac.Sum(nil)[:6]) + " of tenant " + tenant
}
