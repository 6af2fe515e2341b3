package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/tablemeta"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// runBriefly runs `worker run` until it stops by itself or for 20s, and
// returns its logs and error: a worker that refuses to start returns at
// once.
func (e *env) runBriefly(t *testing.T, extra ...string) (logs string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	buf := &syncBuffer{}
	err = run(ctx, e.args("run", extra...), buf, buf)
	if ctx.Err() != nil {
		return buf.String(), fmt.Errorf("still running after 20s (it did not refuse): %v", err)
	}
	return buf.String(), err
}

// record reads the table's record of its writers.
func (e *env) record(t *testing.T) tablemeta.State {
	t.Helper()
	rec, err := tablemeta.NewStore(e.dc, e.table).Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The first worker records its --ttl-from; a worker or a redrive with
// another refuses to start, naming both settings and --ttl-from-change,
// and writes nothing; with --ttl-from-change the new setting is recorded
// after the first (when, by whom), and the old one is then refused.
func TestTTLFromDriftIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fmt.Sprintf(ownTTLTenants, "default-expiration"))
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "workers record the --ttl-from") {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--ttl-from", "json:ttl")
	adminURL(t, logs)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec := e.record(t)
	if len(rec.TTLFrom) != 1 || rec.TTLFrom[0].TTLFrom != "json:ttl" || rec.TTLFrom[0].By != "worker run" {
		t.Fatalf("after the first worker: %+v", rec.TTLFrom)
	}

	// A replay without the flag: refused before it writes the event.
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme", UserID: "u-1"}.bytes())
	replay := []string{"--group", testenv.Name("replay")}
	out, err := e.runBriefly(t, replay...)
	if err == nil || !strings.Contains(err.Error(), `--ttl-from "json:ttl"`) || !strings.Contains(err.Error(), "no --ttl-from") ||
		!strings.Contains(err.Error(), "--ttl-from-change") {
		t.Fatalf("a worker without --ttl-from: %v\n%s", err, out)
	}
	if n := len(e.rows(t)); n != 0 {
		t.Errorf("the refused worker wrote %d rows", n)
	}
	brokers := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}
	if out, err := e.cmd(t, "redrive", append(brokers, "--ttl-from", "header:x-ttl")...); err == nil || !strings.Contains(err.Error(), `--ttl-from "json:ttl"`) ||
		!strings.Contains(err.Error(), `--ttl-from "header:x-ttl"`) || !strings.Contains(err.Error(), "--ttl-from-change") {
		t.Errorf("redrive with another --ttl-from: %v\n%s", err, out)
	}

	// On purpose: recorded, after the first.
	stop, logs = e.startWorker(t, append(replay, "--ttl-from-change")...)
	adminURL(t, logs)
	e.waitRows(t, 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec = e.record(t)
	if len(rec.TTLFrom) != 2 || rec.TTLFrom[1].TTLFrom != "" || !rec.TTLFrom[1].Change || !rec.TTLFrom[1].Since.After(rec.TTLFrom[0].Since) {
		t.Fatalf("after --ttl-from-change: %+v", rec.TTLFrom)
	}
	if out, err := e.runBriefly(t, "--ttl-from", "json:ttl"); err == nil || !strings.Contains(err.Error(), "no --ttl-from (recorded") {
		t.Errorf("the old setting after the change: %v\n%s", err, out)
	}
}

// On a table set up before the record came, a worker refuses to start and
// says to run setup, which adds the family; and on one whose family has a
// rule that would collect the record.
func TestWorkerRefusesWithoutTheRecordFamily(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	if err := e.ac.DeleteColumnFamily(context.Background(), e.table, tablemeta.Family); err != nil {
		t.Fatal(err)
	}
	if out, err := e.runBriefly(t); err == nil || !strings.Contains(err.Error(), "worker setup") || !strings.Contains(err.Error(), e.table+":m, where the workers record") {
		t.Errorf("a worker on a table without the record's family: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil || !strings.Contains(out, "created family "+e.table+":m") {
		t.Errorf("setup over a table without the record's family: %v\n%s", err, out)
	}
	// A max-age put on the family by hand would collect the record: the
	// worker and setup refuse it, setup --update-gc-policy sets it back.
	if err := e.ac.UpdateFamily(context.Background(), e.table, tablemeta.Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "GC rule max-age 1h") && strings.Contains(err.Error(), "--update-gc-policy")
	}
	if out, err := e.runBriefly(t); !refused(err) {
		t.Errorf("a worker with a max-age on the record's family: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); !refused(err) {
		t.Errorf("setup with a max-age on the record's family: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "check"); codeOf(err) != checkNeedsGC || !strings.Contains(out, "a worker refuses to start on the table") || !strings.Contains(out, "GC rule max-age 1h") {
		t.Errorf("check with a max-age on the record's family: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup", "--update-gc-policy"); err != nil || !strings.Contains(out, "set the GC rule of family "+e.table+":m") {
		t.Errorf("setup --update-gc-policy: %v\n%s", err, out)
	}
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Errorf("setup after the rule was set back: %v\n%s", err, out)
	}
}

// Workers record the tenants file version they run, at start and at each
// reload; worker forget refuses a tenants file that is not the workers'
// version, naming both and the flag that overrides, and its receipt says
// what it checked.
func TestForgetChecksTheWorkersTenantsVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	old := filepath.Join(t.TempDir(), "old.yaml")
	e.tenantsFileCopy(t, old)
	v1 := versionOf(t, e.tenantsFile)
	forget := []string{"--tenant", "acme", "--user", "u-1", "--requested-by", "ticket-7", "--dry-run", "--format", "json"}
	// No worker has run: said, not refused.
	check(t, e, forget, tablemeta.NotRecorded, false, "")
	_, logs := e.startWorker(t, "--tenants-reload-interval", "100ms")
	adminURL(t, logs)
	if rec := e.record(t); len(rec.Versions) != 1 || rec.Versions[0].Version != v1 {
		t.Fatalf("versions after start: %+v, want %s", rec.Versions, v1)
	}
	e.writeTenants(t, strings.Replace(tenantsYAML, "acme: 1h", "acme: 2h", 1))
	v2 := versionOf(t, e.tenantsFile)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		rec := e.record(t)
		newest := rec.Versions[len(rec.Versions)-1]
		return newest.Version == v2, fmt.Sprintf("versions %+v, want %s started last", rec.Versions, v2)
	})

	out, err := e.cmd(t, "forget", append(forget, "--tenants", old)...)
	if codeOf(err) != 2 || !strings.Contains(err.Error(), v1) || !strings.Contains(err.Error(), v2) || !strings.Contains(err.Error(), tablemeta.AllowVersionFlag) {
		t.Fatalf("forget with the old file: exit %d, %v\n%s", codeOf(err), err, out)
	}
	check(t, e, append(forget, "--tenants", old, tablemeta.AllowVersionFlag), tablemeta.Differs, true, v2)
	check(t, e, forget, tablemeta.Matches, false, v2)
}

// check runs worker forget with --format json and checks what its receipt
// says of the tenants file version: outcome, overridden, against the
// workers' version (none: "").
func check(t *testing.T, e *env, args []string, outcome string, overridden bool, workers string) {
	t.Helper()
	out, err := e.cmd(t, "forget", args...)
	var rc struct {
		TenantsVersion tablemeta.VersionCheck `json:"tenants_version"`
	}
	if jerr := json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')+1]), &rc); jerr != nil || codeOf(err) == 1 || codeOf(err) == 2 {
		t.Fatalf("forget %v: %v %v\n%s", args, err, jerr, out)
	}
	c := rc.TenantsVersion
	have := ""
	if c.Workers != nil {
		have = c.Workers.Version
	}
	if c.Outcome != outcome || c.Overridden != overridden || have != workers {
		t.Errorf("forget %v: receipt's check %+v, want %s (overridden %t) against %q", args, c, outcome, overridden, workers)
	}
}

// versionOf is the version of the tenants file at path.
func versionOf(t *testing.T, path string) string {
	t.Helper()
	cfg, err := tenants.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Version
}
