package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Logs, spans, errors and checkpoints outlive every TTL, so the retention
// commands name a row by its tenant and a hash, never by the user or event
// ids it holds: every log line (at debug), span, error and checkpoint of a
// retime that fails on a row and is resumed, a forget, an audit, a
// migration that fails on a row and is resumed, and a redrive interrupted,
// refused a row and run again is searched for the test's ids.
func TestRetentionCommandsNameNoIDs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	const before = "default_ttl: 2d\ntenants:\n  acme: 3h\n"
	e := newEnv(t, before)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// More rows than a retime batch, so that the checkpoint records a
	// position mid-tenant.
	cfg, err := tenants.Parse([]byte(before))
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.NewWriter(e.dc, sink.Target{Table: e.table, Family: "c"}, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	var rows []sink.Row
	for i := range 1200 {
		base := now.Add(-time.Duration(i) * time.Second)
		rows = append(rows, sink.Row{Key: rowkey.Key("acme", fmt.Sprintf("secret-user-%d", i%40), fmt.Sprintf("secret-event-%d", i), base.UnixMilli()),
			Timestamp: cfg.Policy.Cell("acme", base).Timestamp, Value: []byte(`{}`)})
	}
	// And a row outside cellttl's layout whose key holds an id.
	rows = append(rows, sink.Row{Key: "acme#secret-user-foreign#x", Timestamp: cfg.Policy.Cell("acme", now).Timestamp, Value: []byte(`{}`)})
	if _, err := w.Write(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, "default_ttl: 2d\ntenants:\n  acme: 1h\n")

	var logs bytes.Buffer
	var said []string
	cmd := func(name string, extra ...string) error {
		var out bytes.Buffer
		err := run(context.Background(), e.args(name, append(extra, "--log-level", "debug")...), &out, &logs)
		if err != nil {
			said = append(said, err.Error())
		}
		if name == "audit" || name == "migrate" || name == "redrive" {
			said = append(said, out.String()) // a scheduled job's output is a log
		}
		return err
	}
	// The rows after a job's first batch are refused, whether written
	// one by one (a rewrite is a conditional mutation) or in bulk (a
	// deletion): the job stops on a row.
	refuseAfterABatch := func() {
		var bulk, conds atomic.Int64
		proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
			if bulk.Add(1) < 2 {
				return testenv.MutateRowsFault{}
			}
			return testenv.MutateRowsFault{Entry: func([]byte) codes.Code { return codes.InvalidArgument }}
		})
		proxy.SetCondFault(func() error {
			if conds.Add(1) <= 500 { // a batch of the retention jobs
				return nil
			}
			return status.Error(codes.InvalidArgument, "refused by the test proxy")
		})
	}
	accept := func() {
		proxy.SetFault(nil)
		proxy.SetCondFault(nil)
	}
	refuseAfterABatch()
	cp := filepath.Join(t.TempDir(), "checkpoint")
	if err := cmd("retime", "--tenant", "acme", "--checkpoint", cp); err == nil || !strings.Contains(err.Error(), "of tenant acme") {
		t.Fatalf("retime with a refused row: %v", err)
	}
	accept()
	data, err := os.ReadFile(cp)
	if err != nil || !strings.Contains(string(data), `"acme#`) {
		t.Fatalf("checkpoint of the failed retime (%v): %s; want a position in acme's rows", err, data)
	}
	said = append(said, string(data))
	if err := cmd("retime", "--tenant", "acme", "--checkpoint", cp, "--resume", "--pass-delay", "10ms"); err != nil {
		t.Fatalf("resumed retime: %v\n%s", err, logs.String())
	}
	if err := cmd("forget", "--tenant", "acme", "--user", "secret-user-7", "--requested-by", "ticket-1", "--allow-empty", "--second-pass-after", "10ms"); err != nil {
		t.Fatal(err)
	}
	if err := cmd("forget", "--tenant", "acme", "--user", "secret-user-#1", "--requested-by", "ticket-1"); err == nil || !strings.Contains(err.Error(), "contains '#'") {
		t.Errorf("forget of an invalid user id: %v", err)
	}
	_ = cmd("audit", "--tenant", "acme")
	_ = cmd("audit", "--format", "json")

	// A migration (default_ttl 2d to 3d re-times acme's rows) stopped on a
	// refused row, then resumed from its checkpoint.
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte("default_ttl: 2d\ntenants:\n  acme: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, "default_ttl: 3d\ntenants:\n  acme: 1h\n")
	refuseAfterABatch()
	mcp := filepath.Join(t.TempDir(), "migrate.checkpoint")
	if err := cmd("migrate", "--against", old, "--yes", "--checkpoint", mcp); err == nil || !strings.Contains(err.Error(), "of tenant acme") {
		t.Fatalf("migrate with a refused row: %v", err)
	}
	accept()
	data, err = os.ReadFile(mcp)
	if err != nil || !strings.Contains(string(data), `"acme#`) {
		t.Fatalf("checkpoint of the failed migration (%v): %s; want a position in acme's rows", err, data)
	}
	said = append(said, string(data))
	if err := cmd("migrate", "--against", old, "--yes", "--checkpoint", mcp, "--resume"); err != nil {
		t.Fatalf("resumed migration: %v\n%s", err, logs.String())
	}

	// Dead letters of an unlisted tenant, re-driven once it is listed: a
	// run interrupted while it writes, one that has a row refused and
	// records a checkpoint, and one that writes.
	const unlisted = "default_ttl: 3d\nunlisted_tenants: dead-letter\ntenants:\n  acme: 1h\n"
	e.writeTenants(t, unlisted)
	stop, _ := e.startWorker(t)
	var letters [][]byte
	for i := range 3 {
		letters = append(letters, click{EventID: fmt.Sprintf("secret-event-r%d", i), TenantID: "newco", UserID: "secret-user-r"}.bytes())
	}
	testenv.Produce(t, e.brokers, e.topic, letters...)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.writeTenants(t, unlisted+"  newco: 1h\n")
	brokers := []string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}
	if err := cmd("redrive", brokers...); err != nil {
		t.Fatalf("redrive, dry run: %v", err)
	}
	rcp := filepath.Join(t.TempDir(), "redrive.checkpoint")
	// The writer retries a refused write until its context ends: the run
	// is interrupted there.
	ctx, cancel := context.WithCancel(context.Background())
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		cancel()
		return testenv.MutateRowsFault{Refuse: status.Error(codes.Unavailable, "refused by the test proxy")}
	})
	var out bytes.Buffer
	err = run(ctx, e.args("redrive", append(brokers, "--apply", "--trust-unsigned-letters", "--checkpoint", rcp, "--log-level", "debug")...), &out, &logs)
	if err == nil {
		t.Fatal("redrive interrupted while writing: no error")
	}
	said = append(said, err.Error(), out.String())
	// A row is refused only when others of its request are written: all
	// refused is an outage, retried.
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		return testenv.MutateRowsFault{Entry: func(key []byte) codes.Code {
			if bytes.HasSuffix(key, []byte("secret-event-r0")) {
				return codes.InvalidArgument
			}
			return codes.OK
		}}
	})
	if err := cmd("redrive", append(brokers, "--apply", "--trust-unsigned-letters", "--checkpoint", rcp)...); err != nil || !strings.Contains(logs.String(), "bigtable_refused:1") {
		t.Fatalf("redrive with a row refused: %v\n%s", err, logs.String())
	}
	proxy.SetFault(nil)
	data, err = os.ReadFile(rcp)
	if err != nil || !strings.Contains(string(data), `"next"`) {
		t.Fatalf("checkpoint of the redrive (%v): %s", err, data)
	}
	said = append(said, string(data))
	if err := cmd("redrive", append(brokers, "--apply", "--trust-unsigned-letters")...); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if n := len(e.rows(t)); n == 0 {
		t.Fatal("nothing written")
	}
	for _, s := range rec.Ended() {
		said = append(said, s.Name(), s.Status().Description)
		for _, a := range s.Attributes() {
			said = append(said, string(a.Key)+"="+a.Value.String())
		}
		for _, ev := range s.Events() {
			said = append(said, ev.Name)
			for _, a := range ev.Attributes {
				said = append(said, string(a.Key)+"="+a.Value.String())
			}
		}
	}
	said = append(said, strings.Split(logs.String(), "\n")...)
	if len(rec.Ended()) == 0 || !strings.Contains(logs.String(), "msg=forget") || !strings.Contains(logs.String(), `msg="migration step done"`) || !strings.Contains(logs.String(), "msg=redrive") {
		t.Fatalf("nothing to search: %d spans, logs:\n%s", len(rec.Ended()), logs.String())
	}
	for _, s := range said {
		if strings.Contains(s, "secret-user") || strings.Contains(s, "secret-event") {
			t.Errorf("an id where no TTL reaches: %s", s)
		}
	}
}
