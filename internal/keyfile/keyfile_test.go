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

// A key file others may read, or whose group may while this process owns
// it, is refused, and the error says the mode; never what the file holds.
func TestKeyFileMode(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	for _, c := range []struct {
		mode os.FileMode
		err  string
	}{
		{0o600, ""}, {0o400, ""},
		{0o644, "mode 0644 lets others read or write it"},
		{0o604, "mode 0604 lets others read or write it"},
		{0o640, "mode 0640 lets its group read or write it, and this process owns it"},
		{0o620, "mode 0620 lets its group"},
	} {
		p := write(t, key+"\n")
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p, "key file")
		switch {
		case c.err == "" && err != nil:
			t.Errorf("mode %04o: %v", c.mode, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), key)):
			t.Errorf("mode %04o: %v, want %q", c.mode, err, c.err)
		}
	}
}

// A key file past MaxFileBytes is refused, naming the bound.
func TestKeyFileIsBounded(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n"
	p := write(t, strings.Repeat(key, MaxFileBytes/len(key)+1))
	if _, err := Read(p, "letter key file"); err == nil || !strings.Contains(err.Error(), "larger than 65536 bytes") {
		t.Errorf("a key file past MaxFileBytes: %v, want it refused", err)
	}
	if _, err := Read(write(t, strings.Repeat(key, MaxFileBytes/len(key))), "letter key file"); err != nil {
		t.Errorf("a key file within MaxFileBytes: %v", err)
	}
}

// A secret file past its bound is refused, naming the setting and the
// bound, never cut short and sent (a broker would refuse the truncated
// token in its own words); at the bound it is read.
func TestFirstLineIsBounded(t *testing.T) {
	const flag = "--kafka-sasl-oauthbearer-token-file"
	long := strings.Repeat("a", 1025)
	_, err := FirstLine(write(t, long), flag, 1024)
	if err == nil || !strings.Contains(err.Error(), flag) || !strings.Contains(err.Error(), "larger than 1024 bytes") || strings.Contains(err.Error(), "aaaa") {
		t.Errorf("a token file of 1025 bytes at a bound of 1024: %v, want it refused naming %s and the bound, not quoting it", err, flag)
	}
	if line, err := FirstLine(write(t, long[:1024]), flag, 1024); err != nil || len(line) != 1024 {
		t.Errorf("a token file of 1024 bytes at a bound of 1024: %d bytes, %v", len(line), err)
	}
}
