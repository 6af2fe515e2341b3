package tenants

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A directory of *.yaml files is one tenants file: the top-level keys in
// one, tenants in any; laid out as a ConfigMap volume lays it out (the
// files symlinks into a hidden ..data directory, which is skipped).
func TestDirectoryOfFiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_25")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, data, map[string]string{
		"main.yaml":     "default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n",
		"more.yaml":     "tenants:\n  globex: 3d\n  initech: {ttl: 1d, max_ttl: 2d}\n",
		"notes.txt":     "not yaml",
		"..hidden.yaml": "tenants:\n  hidden: 1h\n",
	})
	for _, name := range []string{"main.yaml", "more.yaml", "notes.txt"} {
		if err := os.Symlink(filepath.Join("..2026_11_25", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policy.Tenants) != 3 || cfg.Policy.Tenants["initech"] != 24*time.Hour || cfg.Unlisted != UnlistedDeadLetter {
		t.Errorf("tenants %v, unlisted %s", cfg.Policy.Tenants, cfg.Unlisted)
	}
	// One file alone keeps the version it had as a file.
	single, err := Load(filepath.Join(data, "main.yaml"))
	if err != nil || single.Version != Version([]byte("default_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n")) {
		t.Errorf("a file's version changed: %v", err)
	}
}

// Errors name the file and its line: a tenant in two files, a top-level
// key in two, an error inside one, default_ttl in none.
func TestDirectoryErrorsNameTheFile(t *testing.T) {
	for _, c := range []struct {
		files map[string]string
		want  []string
	}{
		{map[string]string{"a.yaml": "default_ttl: 2d\ntenants:\n  acme: 1h\n", "b.yaml": "tenants:\n  globex: 1h\n  acme: 2h\n"},
			[]string{"b.yaml line 3: tenants.acme: also defined at a.yaml line 3"}},
		{map[string]string{"a.yaml": "default_ttl: 2d\n", "b.yaml": "default_ttl: 3d\ntenants:\n  acme: 1h\n"},
			[]string{"b.yaml line 1: default_ttl: also at a.yaml line 1"}},
		{map[string]string{"a.yaml": "default_ttl: 2d\n", "b.yaml": "tenants:\n  acme: 0s\n"},
			[]string{`b.yaml line 2: tenants.acme: TTL "0s" must be positive`}},
		{map[string]string{"a.yaml": "tenants:\n  acme: 1h\n", "b.yaml": "tenants:\n  globex: 1h\n"},
			[]string{"the directory: default_ttl is missing"}},
		{map[string]string{"a.yaml": "default_ttl: 2d\n", "b.yaml": "tenants: [\n"},
			[]string{"b.yaml: parse YAML"}},
	} {
		dir := t.TempDir()
		writeFiles(t, dir, c.files)
		_, err := Load(dir)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want %q", c.files, err, w)
			}
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no *.yaml file") {
		t.Errorf("an empty directory: %v", err)
	}
}

// The reloader reads a directory as it reads a file: an edit of one of
// its files is applied, a tenant added twice is refused and the last good
// config keeps running.
func TestReloadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": "default_ttl: 2d\ntenants:\n  acme: 1h\n", "b.yaml": "tenants:\n  globex: 1h\n"})
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReloader(dir, cfg, time.Minute, slog.New(slog.DiscardHandler))
	writeFiles(t, dir, map[string]string{"b.yaml": "tenants:\n  globex: 3h\n"})
	if !r.Reload() || r.Current().Policy.Tenants["globex"] != 3*time.Hour {
		t.Fatalf("an edit of b.yaml not applied: %+v", r.Status())
	}
	writeFiles(t, dir, map[string]string{"b.yaml": "tenants:\n  globex: 3h\n  acme: 2h\n"})
	if r.Reload() || r.Current().Policy.Tenants["acme"] != time.Hour || !strings.Contains(r.Status().LastError, "b.yaml line 3") {
		t.Errorf("a tenant defined twice was not refused: %+v", r.Status())
	}
}

// A tenants file past MaxFileBytes is refused, naming the file and the
// bound, before more than the bound is held: a path naming the wrong file
// (a disk image, a log) cannot take the worker's memory. The YAML below
// the bound parses as before.
func TestTenantsFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "tenants.yaml")
	body := "default_ttl: 2d\ntenants:\n  acme: 1h\n# "
	if err := os.WriteFile(big, []byte(body+strings.Repeat("x", MaxFileBytes-len(body))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err != nil {
		t.Fatalf("a file of exactly MaxFileBytes: %v", err)
	}
	f, err := os.OpenFile(big, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "larger than 16777216 bytes") {
		t.Errorf("a file one byte past MaxFileBytes: %v, want it refused, naming the file and the bound", err)
	}
	writeFiles(t, dir, map[string]string{"a.yaml": "tenants:\n  acme: 1h\n"})
	if err := os.Rename(big, filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a directory holding a file past MaxFileBytes: %v, want it refused", err)
	}
}
