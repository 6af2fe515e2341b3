package keyfile

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeys(t *testing.T) {
	k1, k2 := strings.Repeat("a", 32), strings.Repeat("b", 40)
	keys, err := Read(write(t, "# rotated\n"+base64.StdEncoding.EncodeToString([]byte(k1))+"\n\n  "+base64.StdEncoding.EncodeToString([]byte(k2))+"  \n"), "key file")
	if err != nil || len(keys) != 2 || string(keys[0]) != k1 || string(keys[1]) != k2 {
		t.Errorf("keys %q, %v", keys, err)
	}
}

func TestKeyFileErrors(t *testing.T) {
	for name, tt := range map[string]struct{ content, want string }{
		"short":      {base64.StdEncoding.EncodeToString([]byte("sixteen bytes ok")), "a key of 16 bytes, want at least 32"},
		"not b64":    {"not base64 at all!", "line 1: not standard base64"},
		"empty":      {"# only a comment\n\n", "no key"},
		"stray char": {"c2VjcmV0!", "not standard base64"},
	} {
		_, err := Read(write(t, tt.content), "letter key file")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), tt.content) && tt.content != "" {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}
	if _, err := Read(t.TempDir(), "letter key file"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}
