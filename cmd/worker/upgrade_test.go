package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// previousRelease builds the newest release before this one from its
// source in testdata (release-<version>.tar.gz, written from its commit by
// scripts/release.sh --source), with this checkout's module cache: the
// release a user rolls back to, or upgrades from. The source is kept in
// the tree because a clone need not have tags or history;
// internal/release's TestKeptReleaseIsItsCommit checks it against the
// release's commit where the history is there.
func previousRelease(t *testing.T) (bin, version string) {
	t.Helper()
	version, archive := testenv.PreviousRelease(t, "testdata")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	for path, body := range testenv.ReadTarGz(t, archive) {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", "worker", "./cmd/worker")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build release %s: %v\n%s", version, err, out)
	}
	bin = filepath.Join(dir, "worker")
	if out, err := exec.Command(bin, "version").Output(); err != nil || !strings.HasPrefix(string(out), "worker "+version+" ") {
		t.Fatalf("the build of %s says %q (%v)", archive, out, err)
	}
	return bin, version
}

// The previous release and this one take turns on the same table, ledger,
// topic and group, in both orders (an upgrade, a rollback): each runs its
// own worker setup, then consumes where the other stopped. Then the later
// one erases a user and the earlier one replays the whole topic in a new
// group. Every event has its row, each cell one version (the releases
// write the same cells for the same record), and the erased user's rows
// stay gone. A table whose record names a newer oldest writer than this
// release is refused by setup and run, naming both releases.
func TestUpgradeAndRollBack(t *testing.T) {
	t.Parallel()
	prev, prevVersion := previousRelease(t)
	cur := testenv.WorkerBinary(t)
	t.Logf("releases %s (from its source in testdata) and %s", prevVersion, release.Version)
	t.Run("upgrade", func(t *testing.T) { takeTurns(t, prev, cur) })
	t.Run("rollback", func(t *testing.T) { takeTurns(t, cur, prev) })
	t.Run("refused", func(t *testing.T) {
		e := newEnv(t, "default_ttl: 2d\n")
		if out, err := e.cmd(t, "setup"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		if err := tablemeta.NewStore(e.dc, e.table).RecordOldestWriter(context.Background(), "999.0.0"); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"setup", "run"} {
			out, err := e.cmd(t, cmd)
			if err == nil || !strings.Contains(err.Error(), "written by release 999.0.0 or newer") || !strings.Contains(err.Error(), "this is release "+release.Version) {
				t.Errorf("worker %s on a table for release 999.0.0: %v\n%s", cmd, err, out)
			}
		}
	})
}

// takeTurns runs first, then second, on one table, then replays with
// first after second erased a user.
func takeTurns(t *testing.T, first, second string) {
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: 3d\n")
	ctx := context.Background()
	fast := []string{"--erasure-refresh", "200ms", "--max-clock-skew", "2s"}
	at := time.Now().Add(-10 * time.Minute).UTC()
	batch := func(from, n int) [][]byte {
		var out [][]byte
		for i := from; i < from+n; i++ {
			out = append(out, click{EventID: fmt.Sprintf("e-%d", i), TenantID: []string{"acme", "globex"}[i%2], UserID: fmt.Sprintf("u-%d", i%3),
				OccurredAt: at.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)}.bytes())
		}
		return out
	}
	turn := func(bin string, from, n int) {
		t.Helper()
		if err := lab.Run(ctx, bin, nil, e.args("setup")...); err != nil {
			t.Fatal(err)
		}
		testenv.Produce(t, e.brokers, e.topic, batch(from, n)...)
		p := e.startBinary(t, bin, fast...)
		e.waitRows(t, from+n, time.Minute)
		e.waitCommitted(t, time.Minute)
		if err := p.Stop(30 * time.Second); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	turn(first, 0, 30)
	turn(second, 30, 30)

	// u-1 of acme erased by the later release; the earlier replays.
	if err := lab.Run(ctx, second, nil, e.args("forget", "--tenant", "acme", "--user", "u-1", "--requested-by", "upgrade-test",
		"--second-pass-after", "1s", "--max-clock-skew", "2s")...); err != nil {
		t.Fatal(err)
	}
	e.group = testenv.Name("replay")
	p := e.startBinary(t, first, fast...)
	e.waitCommitted(t, time.Minute)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	rows := e.rows(t)
	erased := 0
	for i := range 60 {
		if i%2 == 0 && i%3 == 1 {
			erased++
		}
	}
	if len(rows) != 60-erased {
		t.Errorf("%d rows, want %d (60 events, %d of acme's u-1 erased)", len(rows), 60-erased, erased)
	}
	for key, r := range rows {
		k, err := rowkey.Parse(key)
		if err != nil {
			t.Fatalf("row %q: %v", key, err)
		}
		if k.Tenant == "acme" && k.User == "u-1" {
			t.Errorf("row %s of the erased user written again", key)
		}
		for col, cells := range cellsOf(r) {
			if len(cells) != 1 {
				t.Errorf("row %s column %s: %d versions, want 1 (the releases wrote different cells for one record)", key, col, len(cells))
			}
		}
	}
}
