package forget

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The users of --user and --users-from, each once, in order: the file's
// lines as given (spaces kept, the line end and a byte order mark taken
// off), blank lines and comments skipped. A bad id is named by its flag and
// line, never quoted: errors reach logs.
func TestUsers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(p, []byte("\ufeffu-2\r\n\n# a comment\nu 3\nu-1\nbad#id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := Users([]string{"u-1", "u-2"}, p)
	if want := []string{"u-1", "u-2", "u 3"}; !slices.Equal(users, want) {
		t.Errorf("users %q, want %q", users, want)
	}
	if err == nil || !strings.Contains(err.Error(), "line 6") || strings.Contains(err.Error(), "bad#id") {
		t.Errorf("a bad id in the file: %v", err)
	}
	if _, err := Users([]string{"ok", "no#pe"}, ""); err == nil || !strings.Contains(err.Error(), "--user number 2") || strings.Contains(err.Error(), "no#pe") {
		t.Errorf("a bad --user: %v", err)
	}
	if _, err := Users(nil, ""); err == nil || !strings.Contains(err.Error(), "--user or --users-from is required") {
		t.Errorf("no user: %v", err)
	}
	if _, err := Users(nil, filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--users-from") {
		t.Errorf("a file that is not there: %v", err)
	}
}
