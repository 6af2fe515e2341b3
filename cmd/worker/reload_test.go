package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// While events flow, the operator edits tenants.yaml: a TTL change applies
// to events processed after the reload, a broken edit and a default_ttl
// edit are refused, and through all of it nothing is lost.
func TestLiveTenantEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--tenants-reload-interval", "100ms")
	occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	total := 0
	// send produces ten acme events and waits until they are all written.
	send := func(phase string) {
		t.Helper()
		values := make([][]byte, 10)
		for i := range values {
			values[i] = click{EventID: fmt.Sprintf("%s-%d", phase, i), TenantID: "acme", UserID: "u", OccurredAt: occurred.Format(time.RFC3339Nano)}.bytes()
		}
		testenv.Produce(t, e.brokers, e.topic, values...)
		total += len(values)
		e.waitRows(t, total, 30*time.Second)
	}
	waitLog := func(s string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() (bool, string) {
			return strings.Contains(logs.String(), s), fmt.Sprintf("no log line with %q", s)
		})
	}

	send("before")
	e.writeTenants(t, strings.Replace(tenantsYAML, "acme: 1h", "acme: 2h", 1))
	waitLog("tenants file reloaded")
	send("after")
	e.writeTenants(t, strings.Replace(tenantsYAML, "acme: 1h", "acme: [1h", 1))
	waitLog("edit refused")
	send("broken")
	e.writeTenants(t, strings.Replace(strings.Replace(tenantsYAML, "acme: 1h", "acme: 2h", 1), "default_ttl: 2d", "default_ttl: 3d", 1))
	waitLog("changes the family's GC rule")
	send("default")
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}

	shift := map[string]time.Duration{"before": time.Hour, "after": 2 * time.Hour, "broken": 2 * time.Hour, "default": 2 * time.Hour}
	rows := e.rows(t)
	if len(rows) != total {
		t.Errorf("%d rows, want %d", len(rows), total)
	}
	for key, r := range rows {
		id := key[strings.LastIndexByte(key, '#')+1:]
		phase := id[:strings.LastIndexByte(id, '-')]
		want := occurred.UnixMicro() + (shift[phase] - defaultTTL).Microseconds()
		ev := cellsOf(r)["event"]
		if len(ev) != 1 || int64(ev[0].Timestamp) != want {
			t.Errorf("%s event: timestamp %v, want %d (TTL %s, default 2d)", id, ev, want, shift[phase])
		}
	}
	if !strings.Contains(logs.String(), "worker setup --update-gc-policy --tenants "+e.tenantsFile) {
		t.Errorf("the default_ttl refusal does not give the command to apply it")
	}
}

func TestCheckExplainsEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	old := e.tenantsFile + ".old"
	e.tenantsFileCopy(t, old)
	code := func(err error) int {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		if err != nil {
			return -1
		}
		return 0
	}

	e.writeTenants(t, strings.Replace(tenantsYAML, "acme: 1h", "acme: 2h\n  newco: 30m", 1))
	out, err := e.cmd(t, "check", "--against", old)
	if code(err) != 0 || !strings.Contains(out, "acme             1h → 2h") || !strings.Contains(out, "newco            added:   30m") ||
		!strings.Contains(out, "cells already written keep the expiry") || !strings.Contains(out, `GC rule "max-age 2d" matches`) {
		t.Errorf("safe edit: exit %d\n%s", code(err), out)
	}

	e.writeTenants(t, strings.Replace(tenantsYAML, "default_ttl: 2d", "default_ttl: 1d", 1))
	out, err = e.cmd(t, "check", "--against", old, "--format", "json")
	var rep checkReport
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		t.Fatalf("json output: %v\n%s", jerr, out)
	}
	if code(err) != 1 || rep.Exit != 1 || rep.Against.ExpiryShift.String() != "-1d" || strings.Join(rep.Against.ShiftedTenants, ",") != "acme,globex" ||
		rep.Table.Matches || rep.Table.Rule != "max-age 2d" || rep.Table.Wanted != "max-age 1d" {
		t.Errorf("default_ttl edit: exit %d %+v %+v", code(err), rep.Against, rep.Table)
	}

	e.writeTenants(t, "default_ttl: 2d\ntenants:\n  acme: 1hour\n")
	out, err = e.cmd(t, "check")
	if code(err) != 2 || !strings.Contains(out, `line 3: tenants.acme: invalid duration "1hour"`) {
		t.Errorf("invalid file: exit %d\n%s", code(err), out)
	}
}

// A newcomer's first command: `worker check --tenants tenants.yaml` on a
// valid file, with no Bigtable named, validates and explains it (it
// stopped with "--project is required"), and says the table was not read.
func TestCheckWithoutBigtable(t *testing.T) {
	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	os.Unsetenv("BIGTABLE_EMULATOR_HOST")
	file := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(file, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"check", "--tenants", file}, &out, &out)
	if err != nil || !strings.Contains(out.String(), "is valid") || !strings.Contains(out.String(), "Table: not checked: no Bigtable given") {
		t.Errorf("check: %v\n%s", err, out.String())
	}
}

// A table not created yet needs worker setup, not a GC rule change: check
// said "needs the family's GC rule changed" (exit 1) before the first setup.
func TestCheckBeforeSetup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	out, err := e.cmd(t, "check")
	if err != nil || !strings.Contains(out, "does not exist yet; `worker setup` creates it") || strings.Contains(out, "needs the family's GC rule changed") {
		t.Errorf("check before setup: %v\n%s", err, out)
	}
}

// worker check says what becomes of the events of tenants the file does
// not list, and what an edit of the policy and the write cap changes.
func TestCheckShowsUnlistedPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	before, after := filepath.Join(dir, "before.yaml"), filepath.Join(dir, "after.yaml")
	if err := os.WriteFile(before, []byte("default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: 3d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(after, []byte("default_ttl: 2d\nunlisted_tenants: dead-letter\nmax_write_rate: 5000\ntenants:\n  acme: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"check", "--tenants", after, "--against", before, "--offline"}, &out, &errOut)
	for _, want := range []string{"are dead-lettered (unlisted_tenants: dead-letter", "unlisted_tenants default_ttl → dead-letter",
		"the tenants removed (globex) are dead-lettered", "max_write_rate no cap → 5000 rows/s per worker"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check (%v) does not say %q:\n%s", err, want, out.String())
		}
	}
}

// worker check takes a directory of tenants files, as --tenants does, and
// warns of a file near the 1 MiB a ConfigMap holds, naming it and what to
// do.
func TestCheckDirectoryAndFileSize(t *testing.T) {
	t.Setenv("BIGTABLE_EMULATOR_HOST", "")
	os.Unsetenv("BIGTABLE_EMULATOR_HOST")
	dir := t.TempDir()
	var big strings.Builder
	big.WriteString("tenants:\n")
	for i := 0; big.Len() < 950<<10; i++ {
		fmt.Fprintf(&big, "  tenant-with-a-long-name-%07d: 1h\n", i)
	}
	for name, data := range map[string]string{"main.yaml": "default_ttl: 2d\ntenants:\n  acme: 1h\n", "big.yaml": big.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"check", "--tenants", dir}, &out, &out)
	if err != nil || !strings.Contains(out.String(), "is valid") || !strings.Contains(out.String(), "Warning: big.yaml is 9") ||
		!strings.Contains(out.String(), "split its tenants over several files") || strings.Contains(out.String(), "main.yaml is") {
		t.Errorf("check of a directory with a file near 1 MiB: %v\n%.2000s", err, out.String())
	}
}
