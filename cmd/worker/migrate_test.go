package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// worker migrate raises default_ttl on a table with data: a plan first,
// then the GC rule and the cells (every row is read: an unlisted tenant's
// event with its own TTL moves too), after which every cell
// follows the new file; a second run has nothing left to do.
func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	seedRows(t, e, tenantsYAML, "acme", 50)
	seedRows(t, e, tenantsYAML, "globex", 50)
	seedRows(t, e, tenantsYAML, "walk-in", 50)
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, strings.Replace(tenantsYAML, "default_ttl: 2d", "default_ttl: 3d", 1))

	out, err := e.cmd(t, "migrate", "--against", old)
	if err != nil || !strings.Contains(out, "set the GC rule to max-age 3d") || !strings.Contains(out, "re-time every row") || !strings.Contains(out, "Nothing changed") {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "check"); codeOf(err) != 1 {
		t.Fatalf("after the plan the GC rule changed: exit %d\n%s", codeOf(err), out)
	}
	if out, err = e.cmd(t, "migrate", "--against", old, "--yes"); err != nil || !strings.Contains(out, "Done: 100 rows re-timed") {
		t.Fatalf("migrate --yes: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "check"); err != nil {
		t.Errorf("after the migration: exit %d\n%s", codeOf(err), out)
	}
	if out, err := e.cmd(t, "audit"); err != nil {
		t.Errorf("audit after the migration: exit %d\n%s", codeOf(err), out)
	}
	out, err = e.cmd(t, "migrate", "--against", old, "--yes", "--format", "json")
	var again struct {
		Steps     []json.RawMessage
		Rewritten int64
		Unchanged int64
	}
	if jerr := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &again); err != nil || jerr != nil || len(again.Steps) != 1 || again.Rewritten != 0 || again.Unchanged != 150 { // every row read, none moved
		t.Errorf("a second run: %v %v %+v\n%s", err, jerr, again, out)
	}
	if _, err := e.cmd(t, "migrate"); codeOf(err) != 2 {
		t.Errorf("migrate without --against: exit %d", codeOf(err))
	}
}

// The same migration shared by two processes: each re-timing step in two
// shards, the GC step once; together they re-time every row once.
func TestMigrateInShards(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	seedRows(t, e, tenantsYAML, "acme", 200)
	seedRows(t, e, tenantsYAML, "globex", 200)
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, strings.Replace(tenantsYAML, "default_ttl: 2d", "default_ttl: 3d", 1))
	if _, err := e.cmd(t, "migrate", "--against", old, "--yes", "--shard", "0/2"); codeOf(err) != 2 {
		t.Errorf("--shard without --step: exit %d", codeOf(err))
	}
	if _, err := e.cmd(t, "migrate", "--against", old, "--yes", "--step", "2", "--shard", "0/2"); codeOf(err) != 2 {
		t.Errorf("the GC step in shards: exit %d", codeOf(err))
	}
	var rewritten int
	for _, run := range [][]string{{"--step", "1", "--shard", "0/2"}, {"--step", "1", "--shard", "1/2"}, {"--step", "2"}, {"--step", "3", "--shard", "0/2"}, {"--step", "3", "--shard", "1/2"}} {
		out, err := e.cmd(t, "migrate", append([]string{"--against", old, "--yes"}, run...)...)
		if err != nil {
			t.Fatalf("migrate %v: %v\n%s", run, err, out)
		}
		var n int
		if _, err := fmt.Sscanf(out[strings.Index(out, "Done: "):], "Done: %d rows re-timed", &n); err != nil {
			t.Fatalf("migrate %v: %v\n%s", run, err, out)
		}
		if run[1] == "3" && (n == 0 || n == 400) {
			t.Errorf("shard %s re-timed %d rows of 400: not a share", run[3], n)
		}
		rewritten += n
	}
	if rewritten != 400 {
		t.Errorf("the shards re-timed %d rows, want 400, each once", rewritten)
	}
	if out, err := e.cmd(t, "audit"); err != nil {
		t.Errorf("audit after the migration: exit %d\n%s", codeOf(err), out)
	}
}
