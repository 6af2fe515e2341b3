package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/sink/sinktest"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
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
// No row is aged between 50 and 70 minutes (the 601st is 70 minutes old):
// a test that shortens a TTL to an hour counts the same rows live and
// expired for 10 minutes, however slowly it runs.
func seedRows(t *testing.T, e *env, yaml, tenant string, n int) map[string]time.Time {
	t.Helper()
	cfg, err := tenants.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	rows := make([]sink.Row, n)
	out := map[string]time.Time{}
	for i := range rows {
		age := time.Duration(i) * 5 * time.Second
		if age >= 50*time.Minute {
			age += 20 * time.Minute
		}
		base := now.Add(-age)
		key := rowkey.Key(tenant, fmt.Sprintf("u%d", i), fmt.Sprintf("e%d", i), base.UnixMilli())
		rows[i] = sinktest.Event(cfg.Policy, tenant, key, base, []byte(`{}`))
		out[key] = base
	}
	sinktest.Write(t, e.dc, sink.Target{Table: e.table, Family: "c"}, rows)
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
	bases := seedRows(t, e, longer, "acme", 1200) // written under 3h, ages up to 120m
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
	if err != nil || !strings.Contains(out, "600 to re-time, 600 to delete at once") {
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
