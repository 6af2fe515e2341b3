package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A scan that keeps answering is work, however long it takes: worker audit
// and worker read over rows that Bigtable answers 300ms apart run well past
// a --service-timeout of 1s, and end as they would have. The same scans,
// answered no more after their fourth row, end a second after it, naming
// the read that stopped: a stall while the command works is a wait like
// one at its start.
func TestAScanThatAnswersIsNotCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	cfg, err := tenants.Load(e.tenantsFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.NewWriter(e.dc, sink.Target{Table: e.table, Family: "c"}, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const rows = 12
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var batch []sink.Row
	for i := range rows {
		id := fmt.Sprint("r-", i)
		batch = append(batch, sink.Row{Key: rowkey.Key("acme", "u-1", id, at.UnixMilli()), Timestamp: cfg.Policy.Cell("acme", at).Timestamp,
			Value: []byte(`{"event_id":"` + id + `"}`)})
	}
	if _, err := w.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	env := []string{"BIGTABLE_EMULATOR_HOST=" + proxy.Addr}
	const timeout, every = time.Second, 300 * time.Millisecond
	scan := rows * every
	for _, c := range []struct {
		cmd  string
		args []string
	}{{"audit", nil}, {"read", []string{"--tenant", "acme", "--limit", "0"}}} {
		proxy.SetReadRowsPace(e.table, every, 0)
		code, out, took := runWorker(t, scan+timeout, env, e.args(c.cmd, append(c.args, "--service-timeout", timeout.String())...)...)
		if code != 0 || took < scan {
			t.Errorf("%s, answered every %s: exit %d after %s, want 0 after %s at least; it said:\n%s", c.cmd, every, code, took.Round(time.Millisecond), scan, out)
		}
		if c.cmd == "read" && strings.Count(out, "u-1") != rows {
			t.Errorf("read, answered every %s: not every row:\n%s", every, out)
		}
		proxy.SetReadRowsPace(e.table, every, 4)
		code, out, took = runWorker(t, 4*every+timeout, env, e.args(c.cmd, append(c.args, "--service-timeout", timeout.String())...)...)
		want := "waited 1s for Bigtable emulator at " + proxy.Addr + " (read rows of " + e.table + ") without an answer (--service-timeout 1s)"
		if code != exitNoAnswer || !strings.Contains(out, want) {
			t.Errorf("%s, held after 4 answers: exit %d after %s, want %d and %q; it said:\n%s", c.cmd, code, took.Round(time.Millisecond), exitNoAnswer, want, out)
		}
		t.Logf("%s held after 4 answers: exit %d after %s", c.cmd, code, took.Round(time.Millisecond))
	}
}
