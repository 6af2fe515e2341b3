package retention

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A user is named by an HMAC under the key: the same for the same user and
// key, another under another key, and not the plain hash anyone can
// compute from a guessed id. Without a key, no hash at all.
func TestPseudonyms(t *testing.T) {
	load := func(b byte) *Pseudonyms {
		p := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune('a'+b)), 32)))), 0o600); err != nil {
			t.Fatal(err)
		}
		ps, err := LoadPseudonyms(p)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	k1, k2 := load(1), load(2)
	a := k1.Ref("acme", "u-1")
	if a != k1.Ref("acme", "u-1") || !strings.HasPrefix(a, "user hmac:") || !strings.HasSuffix(a, " of tenant acme") || len(a) != len("user hmac:")+12+len(" of tenant acme") {
		t.Errorf("Ref = %q", a)
	}
	for _, other := range []string{k2.Ref("acme", "u-1"), k1.Ref("acme", "u-2"), k1.Ref("acm", "eu-1")} {
		if other[:22] == a[:22] {
			t.Errorf("%q and %q share a pseudonym", a, other)
		}
	}
	plain := sha256.Sum256([]byte("u-1"))
	if strings.Contains(a, hex.EncodeToString(plain[:6])) {
		t.Errorf("the pseudonym %q is the plain hash of the id", a)
	}
	var none *Pseudonyms
	if got := none.Ref("acme", "u-1"); got != "a user of tenant acme" {
		t.Errorf("without a key: %q", got)
	}
}
