package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

func codeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return -1
}

// seedRows writes n rows of tenant at ages 0, 5s, 10s..., as a worker
// would under the tenants file in yaml, and returns their keys and bases.
func seedRows(t *testing.T, e *env, yaml, tenant string, n int) map[string]time.Time {
	t.Helper()
	cfg, err := tenants.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.NewWriter(e.dc, sink.Target{Table: e.table, Family: "c"}, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	rows := make([]sink.Row, n)
	out := map[string]time.Time{}
	for i := range rows {
		base := now.Add(-time.Duration(i) * 5 * time.Second)
		key := rowkey.Key(tenant, fmt.Sprintf("u%d", i), fmt.Sprintf("e%d", i), base.UnixMilli())
		rows[i] = sink.Row{Key: key, Timestamp: cfg.Policy.Cell(tenant, base).Timestamp, Value: []byte(`{}`), WrittenAt: true}
		out[key] = base
	}
	if _, err := w.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	return out
}

// timestamps reads every cell timestamp of the table, by row.
func timestamps(t *testing.T, e *env) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	err := e.dc.Open(e.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, it := range r["c"] {
			out[r.Key()] = append(out[r.Key()], int64(it.Timestamp))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An operator shortens acme's TTL, audits, plans, re-times (killed part-way
// and resumed), audits again, and erases a user.
func TestRetentionCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	longer := strings.Replace(tenantsYAML, "acme: 1h", "acme: 3h", 1)
	bases := seedRows(t, e, longer, "acme", 1200) // written under 3h, ages up to 100m
	e.writeTenants(t, tenantsYAML)                // now 1h

	out, err := e.cmd(t, "audit", "--format", "json")
	var audit struct {
		Clean   bool `json:"clean"`
		Tenants []struct {
			Tenant       string
			RuleBreaking int64 `json:"rule_breaking"`
		}
	}
	if jerr := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &audit); jerr != nil || codeOf(err) != 1 || audit.Clean || audit.Tenants[0].RuleBreaking != 1200 {
		t.Fatalf("audit before: exit %d %+v %v\n%s", codeOf(err), audit, jerr, out)
	}

	before := timestamps(t, e)
	out, err = e.cmd(t, "retime", "--tenant", "acme", "--dry-run")
	if err != nil || !strings.Contains(out, "720 to re-time, 480 to delete at once") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if after := timestamps(t, e); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("the dry run changed the table")
	}

	// A real process, SIGKILLed once it has checkpointed, then resumed.
	cp := filepath.Join(t.TempDir(), "retime.checkpoint")
	cmd := exec.Command(testenv.WorkerBinary(t), e.args("retime", "--tenant", "acme", "--rows-per-second", "400", "--checkpoint", cp, "--passes", "1")...)
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(cp)
		return err == nil, "no checkpoint yet"
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	out, err = e.cmd(t, "retime", "--tenant", "acme", "--resume", "--checkpoint", cp, "--passes", "1", "--format", "json")
	var resumed struct{ Scanned, Unchanged int64 }
	if jerr := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &resumed); err != nil || jerr != nil {
		t.Fatalf("resume: %v %v\n%s", err, jerr, out)
	}
	// The killed run's last batch was not applied, and every row before
	// its checkpoint was: a resume from the checkpoint finds none done.
	if resumed.Scanned == 0 || resumed.Unchanged != 0 {
		t.Errorf("resume: %+v: it did not go on from the checkpoint", resumed)
	}
	cfg, _ := tenants.Parse([]byte(tenantsYAML))
	got := timestamps(t, e)
	now := time.Now()
	for key, base := range bases {
		cell := cfg.Policy.Cell("acme", base)
		ts, live := got[key], cell.Expiry.After(now.Add(time.Second))
		switch {
		case cell.Expiry.Before(now.Add(-time.Second)) && len(ts) != 0:
			t.Errorf("%s: expired under 1h, still has cells %v", key, ts)
		case live && (len(ts) != 2 || ts[0] != cell.Timestamp || ts[1] != cell.Timestamp):
			t.Errorf("%s: cells %v, want two at %d", key, ts, cell.Timestamp)
		}
	}
	if out, err := e.cmd(t, "audit"); err != nil {
		t.Errorf("audit after: exit %d\n%s", codeOf(err), out)
	}

	out, err = e.cmd(t, "forget", "--tenant", "acme", "--user", "u1", "--format", "json", "--requested-by", "ticket-7", "--second-pass-after", "10ms")
	var fr struct {
		Users []struct {
			RowsPerPass []int64 `json:"rows_per_pass"`
		}
	}
	if jerr := json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &fr); err != nil || jerr != nil || len(fr.Users) != 1 || len(fr.Users[0].RowsPerPass) != 2 || fr.Users[0].RowsPerPass[0] == 0 {
		t.Fatalf("forget: %v %v\n%s", err, jerr, out)
	}
	if !strings.Contains(out, "msg=forget") || !strings.Contains(out, "requested_by=ticket-7") || !strings.Contains(out, "operator=") {
		t.Errorf("forget left no audit line naming the requester:\n%s", out)
	}
	for key := range timestamps(t, e) {
		if strings.Contains(key, "#u1#") {
			t.Errorf("%s survived forget", key)
		}
	}
	if _, err := e.cmd(t, "retime"); codeOf(err) != 2 {
		t.Errorf("retime without --tenant: exit %d", codeOf(err))
	}
}

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

// retime racing a worker that writes the same tenant: the file is edited
// and retime starts at once, while the worker is still writing under the
// old file and events keep coming; when retime is done and the worker has
// caught up, every cell follows the new file.
func TestRetimeRacingAWorker(t *testing.T) {
	t.Parallel()
	longer := strings.Replace(tenantsYAML, "acme: 1h", "acme: 3h", 1)
	e := newEnv(t, longer)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--tenants-reload-interval", "200ms")
	producing := make(chan struct{})
	var produced atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-producing:
				return
			default:
			}
			var batch [][]byte
			for j := range 20 {
				batch = append(batch, click{EventID: fmt.Sprintf("r-%d-%d", i, j), TenantID: "acme", UserID: fmt.Sprintf("u%d", j)}.bytes())
			}
			testenv.Produce(t, e.brokers, e.topic, batch...)
			produced.Add(int64(len(batch)))
			time.Sleep(50 * time.Millisecond)
		}
	})
	e.waitRows(t, 200, 30*time.Second)
	e.writeTenants(t, tenantsYAML) // acme 3h -> 1h, and retime at once
	out, err := e.cmd(t, "retime", "--tenant", "acme", "--passes", "4", "--pass-delay", "2s")
	if err != nil {
		t.Fatalf("retime: %v\n%s", err, out)
	}
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "tenants file reloaded"), "the worker has not reloaded the file"
	})
	close(producing)
	wg.Wait()
	e.waitRows(t, int(produced.Load()), 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if audit, err := e.cmd(t, "audit", "--tenant", "acme"); err != nil {
		t.Errorf("audit after retime raced the worker: exit %d\n%s\nretime said:\n%s", codeOf(err), audit, out)
	}
	t.Logf("%d events; retime:\n%s", produced.Load(), out)
}

// retime and migrate declare their shared flags once and check them the
// same way: migrate accepted a negative --rows-per-second.
func TestSharedRetentionFlags(t *testing.T) {
	t.Parallel()
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte(tenantsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	for args, want := range map[*[]string]string{
		{"retime", "--tenant", "acme", "--rows-per-second", "-1"}: "--rows-per-second -1: must not be negative",
		{"migrate", "--against", old, "--rows-per-second", "-1"}:  "--rows-per-second -1: must not be negative",
		{"retime", "--tenant", "acme", "--resume"}:                "--resume needs --checkpoint",
		{"migrate", "--against", old, "--resume"}:                 "--resume needs --checkpoint",
		{"migrate", "--against", old, "--shard", "3/2"}:           `--shard "3/2"`,
	} {
		var out bytes.Buffer
		err := run(context.Background(), *args, &out, &out)
		if code := exitCode(err, &out); code != 2 || !strings.Contains(out.String(), want) {
			t.Errorf("%v: exit %d, %v\n%s\nwant exit 2 and %q", *args, code, err, out.String(), want)
		}
	}
}
