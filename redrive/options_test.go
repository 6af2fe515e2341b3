package redrive

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/deadletter"
)

// An --apply run without keys writes only when the operator vouches for
// the letters; a dry run, or a run with keys, needs no vouching.
func TestValidateRefusesUnverifiedLetters(t *testing.T) {
	keys := testKeys(t)
	for _, tt := range []struct {
		o    Options
		want error
	}{
		{Options{Apply: true}, ErrUnverified},
		{Options{Apply: true, TrustUnsigned: true}, nil},
		{Options{}, nil},
		{Options{Apply: true, Keys: keys}, nil},
	} {
		if err := tt.o.Validate(); !errors.Is(err, tt.want) {
			t.Errorf("apply %t, trust %t, keys %t: %v, want %v", tt.o.Apply, tt.o.TrustUnsigned, tt.o.Keys != nil, err, tt.want)
		}
	}
}

// A checkpoint belongs to one selection of letters, under one tenants file
// and one key: each filter, the file's version and the key change the
// selection, so that a run with others refuses the checkpoint instead of
// skipping letters it never read (or never trusted).
func TestSelectionNamesEveryFilter(t *testing.T) {
	base := Options{Topics: []string{"clicks.dlq"}, Partition: -1, Reasons: []string{"not_json"}}
	sel := base.selection("v1")
	variants := map[string]string{"the tenants file": base.selection("v2")}
	o := base
	o.Topics = []string{"clicks.dlq", "clicks.dlq.1h"}
	variants["the topics"] = o.selection("v1")
	o = base
	o.Partition = 2
	variants["the partition"] = o.selection("v1")
	o = base
	o.From = 10
	variants["the first offset"] = o.selection("v1")
	o = base
	o.To = 20
	variants["the last offset"] = o.selection("v1")
	o = base
	o.Reasons = nil
	variants["the reasons"] = o.selection("v1")
	o = base
	o.Keys = testKeys(t)
	variants["the key"] = o.selection("v1")
	for what, other := range variants {
		if other == sel {
			t.Errorf("another %s, the same selection %q", what, sel)
		}
	}
	if again := base.selection("v1"); again != sel || !strings.Contains(sel, "key=none") {
		t.Errorf("the same run twice: %q and %q", sel, again)
	}
}

// testKeys loads a letter key made for the test.
func testKeys(t *testing.T) *deadletter.Keys {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := deadletter.LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
