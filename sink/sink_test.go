package sink_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/bigtable/bttest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"log/slog"

	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/sink"
)

var ctx = context.Background()

func TestSetupCreatesAndChecks(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := sink.Target{Table: testenv.Name("setup"), Family: "c"}
	t.Cleanup(func() { _ = ac.DeleteTable(ctx, tgt.Table) })

	res, err := sink.Setup(ctx, ac, dc, tgt, 48*time.Hour, sink.SetupOptions{})
	if err != nil || !res.CreatedTable || !res.CreatedFamily {
		t.Fatalf("first setup: %+v, %v", res, err)
	}
	if err := sink.CheckGC(ctx, ac, tgt, 48*time.Hour); err != nil {
		t.Errorf("check after setup: %v", err)
	}
	res, err = sink.Setup(ctx, ac, dc, tgt, 48*time.Hour, sink.SetupOptions{})
	if err != nil || res.CreatedTable || res.CreatedFamily || res.UpdatedRule {
		t.Errorf("second setup is not a no-op: %+v, %v", res, err)
	}

	// A different default_ttl: refused, naming both rules, unless asked.
	err = sink.CheckGC(ctx, ac, tgt, 72*time.Hour)
	if !sink.IsMismatch(err) || !strings.Contains(err.Error(), `"max-age 2d"`) || !strings.Contains(err.Error(), `"max-age 3d"`) {
		t.Errorf("check with another TTL: %v", err)
	}
	_, err = sink.Setup(ctx, ac, dc, tgt, 72*time.Hour, sink.SetupOptions{})
	if !sink.IsMismatch(err) || !strings.Contains(err.Error(), "--update-gc-policy") {
		t.Errorf("setup with another TTL: %v", err)
	}
	res, err = sink.Setup(ctx, ac, dc, tgt, 72*time.Hour, sink.SetupOptions{UpdateGCPolicy: true})
	if err != nil || !res.UpdatedRule || res.OldRule != "max-age 2d" {
		t.Errorf("update: %+v, %v", res, err)
	}
	if err := sink.CheckGC(ctx, ac, tgt, 72*time.Hour); err != nil {
		t.Errorf("check after update: %v", err)
	}
}

func TestSetupRefusesOneSecondOnCells(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := testenv.Table(t, ac, dc, 48*time.Hour)
	w := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), slog.Default())
	if _, err := w.Write(ctx, []sink.Row{{Key: "k", Timestamp: time.Now().UnixMilli() * 1000, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	_, err := sink.Setup(ctx, ac, dc, tgt, time.Second, sink.SetupOptions{UpdateGCPolicy: true})
	if err == nil || !strings.Contains(err.Error(), "holds cells") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("one-second on a family with cells: %v", err)
	}
	if err := sink.CheckGC(ctx, ac, tgt, 48*time.Hour); err != nil {
		t.Errorf("rule changed despite the refusal: %v", err)
	}
	if _, err := sink.Setup(ctx, ac, dc, tgt, time.Second, sink.SetupOptions{UpdateGCPolicy: true, Force: true}); err != nil {
		t.Errorf("with --force: %v", err)
	}
}

func TestCheckGCMissing(t *testing.T) {
	_, ac := testenv.Clients(t)
	err := sink.CheckGC(ctx, ac, sink.Target{Table: testenv.Name("absent"), Family: "c"}, time.Hour)
	if err == nil || !strings.Contains(err.Error(), "worker setup") {
		t.Errorf("missing table: %v", err)
	}
}

func readRow(t *testing.T, dc *bigtable.Client, table, key string) bigtable.Row {
	t.Helper()
	row, err := dc.Open(table).ReadRow(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func TestWriteCells(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := testenv.Table(t, ac, dc, 48*time.Hour)
	writeTime := time.Date(2026, 4, 30, 9, 0, 1, 0, time.UTC)
	cfg := sink.DefaultWriterConfig()
	cfg.Now = func() time.Time { return writeTime }
	w := sink.NewWriter(dc, tgt, cfg, slog.Default())
	ts := time.Date(2026, 4, 30, 9, 0, 0, 123e6, time.UTC).UnixMicro()
	rows := []sink.Row{
		{Key: "a", Timestamp: ts, Value: []byte(`{"x":1}`), WrittenAt: true},
		{Key: "b", Timestamp: ts + 1000, Value: []byte(`{"x":2}`)},
	}
	for range 3 { // redelivery writes the same cells again
		res, err := w.Write(ctx, rows)
		if err != nil || res[0] != nil || res[1] != nil {
			t.Fatalf("write: %v %v", res, err)
		}
	}
	a := readRow(t, dc, tgt.Table, "a")["c"]
	if len(a) != 2 {
		t.Fatalf("row a has %d cells, want event and written_at once each: %v", len(a), a)
	}
	for _, c := range a {
		if int64(c.Timestamp) != ts {
			t.Errorf("%s timestamp %d, want %d", c.Column, c.Timestamp, ts)
		}
		switch c.Column {
		case "c:event":
			if !bytes.Equal(c.Value, rows[0].Value) {
				t.Errorf("event value %q", c.Value)
			}
		case "c:written_at":
			if len(c.Value) != 8 || int64(binary.BigEndian.Uint64(c.Value)) != writeTime.UnixMicro() {
				t.Errorf("written_at %x, want 8-byte big-endian %d", c.Value, writeTime.UnixMicro())
			}
		default:
			t.Errorf("unexpected column %s", c.Column)
		}
	}
	if b := readRow(t, dc, tgt.Table, "b")["c"]; len(b) != 1 || b[0].Column != "c:event" {
		t.Errorf("row b: %v", b)
	}
}

// faultyEmulator runs bttest behind an interceptor that fails MutateRows:
// the first `unavailable` calls whole, and any call carrying a row key with
// "poison" as InvalidArgument, the way a request with a bad entry is refused.
func faultyEmulator(t *testing.T, unavailable int32) (*bigtable.Client, *bigtable.AdminClient, *atomic.Int32) {
	var calls atomic.Int32
	icpt := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if !strings.HasSuffix(info.FullMethod, "/MutateRows") {
			return h(srv, ss)
		}
		n := calls.Add(1)
		if n <= unavailable {
			return status.Error(codes.Unavailable, "injected outage")
		}
		return h(srv, &peek{ServerStream: ss})
	}
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.StreamInterceptor(icpt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	t.Setenv("BIGTABLE_EMULATOR_HOST", srv.Addr)
	dc, ac := testenv.Clients(t)
	return dc, ac, &calls
}

type peek struct{ grpc.ServerStream }

func (p *peek) RecvMsg(m any) error {
	if err := p.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if req, ok := m.(*btpb.MutateRowsRequest); ok {
		for _, e := range req.Entries {
			if bytes.Contains(e.RowKey, []byte("poison")) {
				return status.Error(codes.InvalidArgument, "injected bad entry")
			}
		}
	}
	return nil
}

func TestWriteRetriesWholeCallFailures(t *testing.T) {
	dc, ac, calls := faultyEmulator(t, 10)
	tgt := testenv.Table(t, ac, dc, time.Hour)
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	cfg.AttemptTimeout = 100 * time.Millisecond // the client's own retries end here
	var retried atomic.Int32
	cfg.OnRetry = func(rows int, code codes.Code, _ error) {
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("retry reported code %s", code)
		}
		retried.Add(1)
	}
	w := sink.NewWriter(dc, tgt, cfg, slog.Default())
	rec := tracetest.NewSpanRecorder()
	sctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test").Start(ctx, "batch")
	res, err := w.Write(sctx, []sink.Row{{Key: "k", Timestamp: 1_000_000_000_000, Value: []byte("v")}})
	span.End()
	if err != nil || res[0] != nil {
		t.Fatalf("write: %v %v", res, err)
	}
	attempts := int64(0)
	for _, a := range rec.Ended()[0].Attributes() {
		if a.Key == "cellttl.batch.attempts" {
			attempts = a.Value.AsInt64()
		}
	}
	if attempts < 2 {
		t.Errorf("span says %d attempts after injected failures", attempts)
	}
	if retried.Load() == 0 {
		t.Error("OnRetry was never told of the failures")
	}
	if calls.Load() < 11 {
		t.Errorf("%d MutateRows calls, want the 10 failures and a success", calls.Load())
	}
	if len(readRow(t, dc, tgt.Table, "k")) == 0 {
		t.Error("row not written")
	}
}

func TestWriteIsolatesRefusedRow(t *testing.T) {
	dc, ac, _ := faultyEmulator(t, 0)
	tgt := testenv.Table(t, ac, dc, time.Hour)
	w := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), slog.Default())
	keys := []string{"k0", "k1", "poison", "k3", "k4"}
	rows := make([]sink.Row, len(keys))
	for i, k := range keys {
		rows[i] = sink.Row{Key: k, Timestamp: 1_000_000_000_000, Value: []byte(k)}
	}
	res, err := w.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if k == "poison" {
			if !sink.IsRowError(res[i]) {
				t.Errorf("poison row: %v, want a RowError", res[i])
			}
			continue
		}
		if res[i] != nil {
			t.Errorf("row %s: %v", k, res[i])
		}
		if len(readRow(t, dc, tgt.Table, k)) == 0 {
			t.Errorf("good row %s not written", k)
		}
	}
}

func TestWriteStopsWithContext(t *testing.T) {
	dc, ac, _ := faultyEmulator(t, 1<<30) // never recovers
	tgt := testenv.Table(t, ac, dc, time.Hour)
	cfg := sink.DefaultWriterConfig()
	cfg.AttemptTimeout = 100 * time.Millisecond
	w := sink.NewWriter(dc, tgt, cfg, slog.Default())
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := w.Write(cctx, []sink.Row{{Key: "k", Timestamp: 1_000_000_000_000, Value: []byte("v")}})
	if err == nil {
		t.Fatal("write during an outage reported success")
	}
}
