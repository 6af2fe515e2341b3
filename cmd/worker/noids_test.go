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

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Logs, spans, errors and checkpoints outlive every TTL, so the retention
// commands name a row by its tenant and a hash, never by the user or event
// ids it holds: every log line (at debug), span, error and checkpoint of a
// retime that fails on a row and is resumed, a forget and an audit is
// searched for the test's ids.
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
		if name == "audit" {
			said = append(said, out.String()) // a scheduled job's output is a log
		}
		return err
	}
	// The second batch's rows are refused: the retime stops on a row.
	var calls atomic.Int64
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		if calls.Add(1) < 2 {
			return testenv.MutateRowsFault{}
		}
		return testenv.MutateRowsFault{Entry: func([]byte) codes.Code { return codes.InvalidArgument }}
	})
	cp := filepath.Join(t.TempDir(), "checkpoint")
	if err := cmd("retime", "--tenant", "acme", "--checkpoint", cp); err == nil || !strings.Contains(err.Error(), "of tenant acme") {
		t.Fatalf("retime with a refused row: %v", err)
	}
	proxy.SetFault(nil)
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
	if len(rec.Ended()) == 0 || !strings.Contains(logs.String(), "msg=forget") {
		t.Fatalf("nothing to search: %d spans, logs:\n%s", len(rec.Ended()), logs.String())
	}
	for _, s := range said {
		if strings.Contains(s, "secret-user") || strings.Contains(s, "secret-event") {
			t.Errorf("an id where no TTL reaches: %s", s)
		}
	}
}
