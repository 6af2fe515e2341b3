package sink_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"log/slog"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
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
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	w, err := sink.NewWriter(dc, tgt, sink.DefaultWriterConfig(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, []sink.Row{{Key: "k", Timestamp: time.Now().UnixMilli() * 1000, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	_, err = sink.Setup(ctx, ac, dc, tgt, time.Second, sink.SetupOptions{UpdateGCPolicy: true})
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
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	writeTime := time.Date(2026, 4, 30, 9, 0, 1, 0, time.UTC)
	cfg := sink.DefaultWriterConfig()
	cfg.Now = func() time.Time { return writeTime }
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
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

// faultyEmulator puts the fault proxy in front of the emulator (the real
// one when configured) and opens clients through it.
func faultyEmulator(t *testing.T) (*bigtable.Client, *bigtable.AdminClient, *testenv.BigtableProxy) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	dc, ac := testenv.Clients(t)
	return dc, ac, proxy
}

// refuseFirst fails the first n MutateRows calls whole with code.
func refuseFirst(n int32, code codes.Code) func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
	var calls atomic.Int32
	return func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		if calls.Add(1) <= n {
			return testenv.MutateRowsFault{Refuse: status.Error(code, "injected")}
		}
		return testenv.MutateRowsFault{}
	}
}

// refuseRequestsWith fails whole, with InvalidArgument, every request that
// carries a row key containing "poison": a request with a bad entry, refused
// as a whole.
func refuseRequestsWith(req *btpb.MutateRowsRequest) testenv.MutateRowsFault {
	for _, e := range req.Entries {
		if bytes.Contains(e.RowKey, []byte("poison")) {
			return testenv.MutateRowsFault{Refuse: status.Error(codes.InvalidArgument, "injected bad entry")}
		}
	}
	return testenv.MutateRowsFault{}
}

// refuseEntriesWith refuses, on their own, the entries whose key contains
// "poison", and writes the others.
func refuseEntriesWith(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
	return testenv.MutateRowsFault{Entry: func(key []byte) codes.Code {
		if bytes.Contains(key, []byte("poison")) {
			return codes.InvalidArgument
		}
		return codes.OK
	}}
}

// rowsOf are rows written now: a timestamp in the past would be the
// emulator GC's to collect under the tables' max-age, before a test reads
// the row back (CI saw it: rows "not written after the outage").
func rowsOf(keys ...string) []sink.Row {
	ts := time.Now().UnixMilli() * 1000
	rows := make([]sink.Row, len(keys))
	for i, k := range keys {
		rows[i] = sink.Row{Key: k, Timestamp: ts, Value: []byte(k)}
	}
	return rows
}

func fastRetries() sink.WriterConfig {
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.MaxBackoff = time.Millisecond, 5*time.Millisecond
	cfg.AttemptTimeout = 2 * time.Second
	return cfg
}

func TestWriteRetriesWholeCallFailures(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseFirst(10, codes.Unavailable))
	cfg := fastRetries()
	cfg.AttemptTimeout = 100 * time.Millisecond // the client's own retries end here
	var retried atomic.Int32
	cfg.OnRetry = func(rows int, code codes.Code, _ error) {
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Errorf("retry reported code %s", code)
		}
		retried.Add(1)
	}
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	sctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test").Start(ctx, "batch")
	res, err := w.Write(sctx, rowsOf("k"))
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
	if n := proxy.MutateRowsCalls(); n < 11 {
		t.Errorf("%d MutateRows calls, want the 10 failures and a success", n)
	}
	if len(readRow(t, dc, tgt.Table, "k")) == 0 {
		t.Error("row not written")
	}
	if err := w.Outage(); err != nil {
		t.Errorf("outage still reported after the write went through: %v", err)
	}
}

// A request refused whole because of one row: the probe shows Bigtable
// takes requests without it, so the request is split to find the row.
func TestWriteIsolatesRefusedRow(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseRequestsWith)
	w, err := sink.NewWriter(dc, tgt, fastRetries(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"k0", "k1", "poison", "k3", "k4"}
	res, err := w.Write(ctx, rowsOf(keys...))
	if err != nil {
		t.Fatal(err)
	}
	checkOnlyPoisonBlamed(t, dc, tgt, keys, res)
}

// An entry Bigtable refuses on its own while it writes the others of the
// same request is the row's fault.
func TestWriteBlamesAnEntryRefusedBesideWrittenOnes(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseEntriesWith)
	w, err := sink.NewWriter(dc, tgt, fastRetries(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"k0", "poison", "k2"}
	res, err := w.Write(ctx, rowsOf(keys...))
	if err != nil {
		t.Fatal(err)
	}
	checkOnlyPoisonBlamed(t, dc, tgt, keys, res)
	if n := proxy.MutateRowsCalls(); n != 1 {
		t.Errorf("%d MutateRows calls, want 1: the written entries are the evidence", n)
	}
}

// A batch of one row, refused for its content: blamed only because a
// request without it (the probe) succeeds.
func TestWriteBlamesALoneRowOnlyWhenOthersPass(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	w, err := sink.NewWriter(dc, tgt, fastRetries(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, fault := range []func(*btpb.MutateRowsRequest) testenv.MutateRowsFault{refuseEntriesWith, refuseRequestsWith} {
		proxy.SetFault(fault)
		res, err := w.Write(ctx, rowsOf("poison"))
		if err != nil || !isRowError(res[0]) {
			t.Errorf("a lone refused row: %v %v, want a RowError", res, err)
		}
	}
}

func checkOnlyPoisonBlamed(t *testing.T, dc *bigtable.Client, tgt sink.Target, keys []string, res []error) {
	t.Helper()
	for i, k := range keys {
		if k == "poison" {
			if !isRowError(res[i]) {
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

// Every request refused whole, the probe too, with each code: an outage.
// No row is blamed (which would dead-letter the whole stream); the write
// waits, Outage says why, and everything is written when it ends.
func TestWholeRequestRefusalIsAnOutageForEveryCode(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	for _, code := range []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange,
		codes.PermissionDenied, codes.NotFound, codes.Unavailable, codes.ResourceExhausted, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			var refused atomic.Int32
			proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
				refused.Add(1)
				return testenv.MutateRowsFault{Refuse: status.Error(code, "injected: refused whole")}
			})
			cfg := fastRetries()
			// RESOURCE_EXHAUSTED is an outage once it lasts (see
			// TestThrottlingIsNoOutageAtFirst).
			cfg.ThrottledOutageAfter = 200 * time.Millisecond
			w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			keys := []string{"a-" + code.String(), "b-" + code.String(), "c-" + code.String()}
			done := make(chan []error, 1)
			go func() {
				res, err := w.Write(ctx, rowsOf(keys...))
				if err != nil {
					t.Errorf("write: %v", err)
				}
				done <- res
			}()
			testenv.Eventually(t, 10*time.Second, func() (bool, string) {
				return refused.Load() >= 5 && w.Outage() != nil, fmt.Sprintf("%d refusals, outage %v", refused.Load(), w.Outage())
			})
			// The client retries Unavailable itself until the attempt's
			// deadline, so that outage reads as DeadlineExceeded.
			if err := w.Outage(); !strings.Contains(err.Error(), code.String()) && !strings.Contains(err.Error(), "DeadlineExceeded") {
				t.Errorf("outage %q does not name the code", err)
			}
			select {
			case res := <-done:
				t.Fatalf("write returned during the outage: %v", res)
			default:
			}
			proxy.SetFault(nil)
			res := <-done
			for i, k := range keys {
				if res[i] != nil {
					t.Errorf("row %s blamed for an outage: %v", k, res[i])
				}
				if len(readRow(t, dc, tgt.Table, k)) == 0 {
					t.Errorf("row %s not written after the outage", k)
				}
			}
			if err := w.Outage(); err != nil {
				t.Errorf("outage still reported: %v", err)
			}
		})
	}
}

func TestWriteStopsWithContext(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseFirst(1<<30, codes.Unavailable)) // never recovers
	w, err := sink.NewWriter(dc, tgt, fastRetries(), nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = w.Write(cctx, rowsOf("k"))
	if err == nil {
		t.Fatal("write during an outage reported success")
	}
}

func isRowError(err error) bool {
	var re *sink.RowError
	return errors.As(err, &re)
}

// gate is a Gate that refuses the key refused once its generation is 1,
// and cannot tell, the first unsure times it is asked.
type gate struct {
	gen     atomic.Uint64
	asked   atomic.Int64
	refused string
	unsure  int64
}

func (g *gate) Generation() uint64 { return g.gen.Load() }
func (g *gate) Admits(_ context.Context, key string, _ sink.Source) (bool, error) {
	if g.asked.Add(1) <= g.unsure {
		return false, errors.New("injected: the ledger cannot tell")
	}
	return g.gen.Load() == 0 || key != g.refused, nil
}

// A row whose user is erased while its write is being retried is not sent
// again: its result is ErrWithdrawn and it is not in the table; the rows
// beside it are written; a row decided under the current generation is
// not asked about.
func TestGateWithdrawsRowsBetweenAttempts(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	g := &gate{refused: "erased"}
	var calls atomic.Int32
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		if calls.Add(1) == 1 {
			g.gen.Store(1) // the erasure lands while the first attempt fails
			// A code the client does not retry itself: the Writer does.
			return testenv.MutateRowsFault{Refuse: status.Error(codes.PermissionDenied, "injected")}
		}
		return testenv.MutateRowsFault{}
	})
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.Gate = time.Millisecond, g
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMilli() * 1000
	rows := []sink.Row{
		{Key: "kept", Timestamp: ts, Value: []byte("v")},
		{Key: "erased", Timestamp: ts, Value: []byte("v")},
		{Key: "decided-after", Timestamp: ts, Value: []byte("v"), Gen: 1},
	}
	res, err := w.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || !errors.Is(res[1], sink.ErrWithdrawn) || res[2] != nil {
		t.Fatalf("results %v, want nil, ErrWithdrawn, nil", res)
	}
	if len(readRow(t, dc, tgt.Table, "erased")) != 0 || len(readRow(t, dc, tgt.Table, "kept")) == 0 || len(readRow(t, dc, tgt.Table, "decided-after")) == 0 {
		t.Error("the withdrawn row was written, or a kept one was not")
	}
	// Asked about the two rows of generation 0 before the first attempt
	// (generation 0 admits all) and again before the second: not about
	// the row of generation 1, nor twice about a row it admitted at 1.
	if n := g.asked.Load(); n != 2 {
		t.Errorf("the gate was asked %d times, want 2", n)
	}
}

// A gate that cannot tell holds the write: the rows it was asked about
// are neither sent nor withdrawn, and once it answers, the one it refuses
// is withdrawn and the others are written.
func TestGateThatCannotTellHoldsTheWrite(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	g := &gate{refused: "erased", unsure: 3}
	g.gen.Store(1)
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.MaxBackoff, cfg.Gate = time.Millisecond, time.Millisecond, g
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMilli() * 1000
	rows := []sink.Row{{Key: "kept", Timestamp: ts, Value: []byte("v")}, {Key: "erased", Timestamp: ts, Value: []byte("v")}}
	res, err := w.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || !errors.Is(res[1], sink.ErrWithdrawn) {
		t.Fatalf("results %v, want nil, ErrWithdrawn", res)
	}
	if len(readRow(t, dc, tgt.Table, "erased")) != 0 || len(readRow(t, dc, tgt.Table, "kept")) == 0 {
		t.Error("the refused row was written, or the kept one was not")
	}
	// Three passes that could not tell (each ends at its first row),
	// then one that asked about both.
	if n := g.asked.Load(); n != 5 {
		t.Errorf("the gate was asked %d times, want 5", n)
	}
}

// Writes Bigtable refuses with RESOURCE_EXHAUSTED are retried at a rate
// cut to half of what was sent, not at full speed, and every row is
// written: the throttle holds rows back, it drops none.
func TestWriterSlowsDownWhenThrottled(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, 48*time.Hour))
	proxy.SetFault(refuseFirst(1, codes.ResourceExhausted))
	th := sink.NewThrottle()
	th.SetCap(5000)
	cfg := sink.DefaultWriterConfig()
	cfg.InitialBackoff, cfg.MaxBackoff, cfg.Throttle = time.Millisecond, time.Millisecond, th
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMilli() * 1000
	var rows []sink.Row
	for i := range 200 {
		rows = append(rows, sink.Row{Key: fmt.Sprintf("r-%03d", i), Timestamp: ts, Value: []byte("v")})
	}
	res, err := w.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != nil {
			t.Fatalf("row %d: %v", i, r)
		}
	}
	// Cut to 100 (half the 200 rows sent), grown by a tenth since.
	if l := th.Limit(); l < 100 || l > 150 {
		t.Errorf("after RESOURCE_EXHAUSTED on a request of 200 rows: limit %v rows/s, want about half of them", l)
	}
	n := 0
	err = dc.Open(tgt.Table).ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true })
	if err != nil || n != 200 {
		t.Errorf("%d rows in the table (%v), want 200", n, err)
	}
}

// The halves of a request split to find a refused row are paced too: each
// sends its rows again. 64 rows with one refused send 190 (64, then
// 32+32, 16+16, ... 1+1): at a cap of 100 a second with a burst of 100,
// that is 0.9 s at least, where unpaced halves take a few milliseconds.
func TestIsolatingARefusedRowIsPaced(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseRequestsWith)
	th := sink.NewThrottle()
	th.SetCap(100)
	cfg := fastRetries()
	cfg.Throttle = th
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	keys[37] = "poison"
	start := time.Now()
	res, err := w.Write(ctx, rowsOf(keys...))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 850*time.Millisecond {
		t.Errorf("190 rows sent at a cap of 100/s (a burst of 100) took %s, want 0.9 s or more: the split requests were not paced", took)
	}
	checkOnlyPoisonBlamed(t, dc, tgt, keys, res)
}

// A row waiting for the write rate is checked against the ledger when it
// leaves, not only before it waited: a user erased during the wait has no
// row written after it (the erasure bound counts on a check right before
// each send). 40 rows at a cap of 10 a second wait 3 s; the user is erased
// 0.5 s in.
func TestRowsWaitingForTheRateAreCheckedWhenSent(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	th := sink.NewThrottle()
	th.SetCap(10)
	g := &gate{refused: "erased"}
	cfg := fastRetries()
	cfg.Throttle, cfg.Gate = th, g
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"erased"}
	for i := range 39 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	erase := time.AfterFunc(500*time.Millisecond, func() { g.gen.Store(1) })
	defer erase.Stop()
	res, err := w.Write(ctx, rowsOf(keys...))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0], sink.ErrWithdrawn) || len(readRow(t, dc, tgt.Table, "erased")) != 0 {
		t.Errorf("the row of a user erased while it waited for the rate: %v, in the table: %v; want ErrWithdrawn, not written", res[0], len(readRow(t, dc, tgt.Table, "erased")) != 0)
	}
	for i, k := range keys[1:] {
		if res[i+1] != nil || len(readRow(t, dc, tgt.Table, k)) == 0 {
			t.Fatalf("row %s: %v, or not written", k, res[i+1])
		}
	}
}

// A row Bigtable refuses for good, whose user is erased while it is being
// written, is withdrawn rather than refused: the caller settles it
// unwritten at once, and makes no dead letter of it (a copy of the user's
// data). A row decided under the current generation is not asked about.
func TestRefusedRowOfAnErasedUserIsWithdrawn(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	g := &gate{refused: "poison"}
	proxy.SetFault(func(req *btpb.MutateRowsRequest) testenv.MutateRowsFault {
		g.gen.Store(1) // the erasure lands while the request is in flight
		return refuseEntriesWith(req)
	})
	cfg := fastRetries()
	cfg.Gate = g
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf("k0", "poison", "poison") // the second decided under the erasure
	rows[2].Gen = 1
	res, err := w.Write(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || !errors.Is(res[1], sink.ErrWithdrawn) || !isRowError(res[2]) {
		t.Fatalf("results %v, want nil, ErrWithdrawn, a RowError", res)
	}
	if len(readRow(t, dc, tgt.Table, "k0")) == 0 {
		t.Error("the good row was not written")
	}
}

// The halves of a request split to find a refused row are checked again
// when the ledger changed since the split began: a user erased while the
// first half was being sent has no row written by the second.
func TestSplitRequestIsCheckedBeforeEachHalf(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	g := &gate{refused: "erased"}
	var calls atomic.Int32
	proxy.SetFault(func(req *btpb.MutateRowsRequest) testenv.MutateRowsFault {
		if calls.Add(1) == 3 {
			g.gen.Store(1) // during the first half (the probe was call 2)
		}
		return refuseRequestsWith(req)
	})
	cfg := fastRetries()
	cfg.Gate = g
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"poison", "k1", "k2", "k3", "k4", "k5", "k6", "erased"}
	res, err := w.Write(ctx, rowsOf(keys...))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[7], sink.ErrWithdrawn) || len(readRow(t, dc, tgt.Table, "erased")) != 0 {
		t.Errorf("the row of a user erased during a split: %v, in the table: %v; want ErrWithdrawn, not written", res[7], len(readRow(t, dc, tgt.Table, "erased")) != 0)
	}
	if !isRowError(res[0]) {
		t.Errorf("poison row: %v, want a RowError", res[0])
	}
	for i := 1; i < 7; i++ {
		if res[i] != nil || len(readRow(t, dc, tgt.Table, keys[i])) == 0 {
			t.Errorf("row %s: %v, or not written", keys[i], res[i])
		}
	}
}

// Requests refused whole with RESOURCE_EXHAUSTED are Bigtable's flow
// control, which the throttle answers: no outage (no unready pod, no
// error log) until nothing went through for ThrottledOutageAfter. Any
// other code refused whole is one at once.
func TestThrottlingIsNoOutageAtFirst(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	for _, c := range []struct {
		code   codes.Code
		outage bool
	}{{codes.ResourceExhausted, false}, {codes.PermissionDenied, true}} {
		proxy.SetFault(refuseFirst(5, c.code))
		cfg := fastRetries()
		var w *sink.Writer
		var outages atomic.Int32
		cfg.OnRetry = func(int, codes.Code, error) {
			if w.Outage() != nil {
				outages.Add(1)
			}
		}
		w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Write(ctx, rowsOf("r-"+c.code.String()))
		if err != nil || res[0] != nil {
			t.Fatalf("%s: %v %v", c.code, res, err)
		}
		if got := outages.Load() > 0; got != c.outage {
			t.Errorf("five requests refused whole with %s: an outage reported %v, want %v", c.code, got, c.outage)
		}
	}
}

// A request split to find a refused row ends under steady erasures and a
// rate cap: each half is checked again under the ledger in force when it
// leaves, not sent back to the start because the ledger moved while it
// waited for the rate (the generation moves every 500 ms here; each half
// waits about a second).
func TestSplitRequestEndsUnderSteadyErasures(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	proxy.SetFault(refuseRequestsWith)
	g := &gate{refused: "nobody"}
	bumps := time.NewTicker(500 * time.Millisecond)
	defer bumps.Stop()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-bumps.C:
				g.gen.Add(1)
			}
		}
	}()
	th := sink.NewThrottle()
	th.SetCap(20)
	cfg := fastRetries()
	cfg.Gate, cfg.Throttle = g, th
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"poison"}
	for i := range 39 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := w.Write(wctx, rowsOf(keys...))
	if err != nil {
		t.Fatalf("a batch with a refused row, at 20 rows/s under erasures every 500 ms, did not end in 20 s: %v", err)
	}
	checkOnlyPoisonBlamed(t, dc, tgt, keys, res)
}

// A batch held (here: the gate cannot tell about one of its rows) spends
// none of the write rate while it waits: a batch of another partition,
// beside it, writes as fast as alone.
func TestHeldBatchSpendsNoRate(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	th := sink.NewThrottle()
	th.SetCap(20)
	cfg := fastRetries()
	cfg.Gate, cfg.Throttle = stuckGate{}, th
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	healthy := func(prefix string) time.Duration {
		keys := make([]string, 60)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s%02d", prefix, i)
		}
		rows := rowsOf(keys...)
		for i := range rows {
			rows[i].Gen = 1 // decided under the gate's generation: not asked
		}
		start := time.Now()
		if _, err := w.Write(ctx, rows); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	alone := healthy("a")
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = w.Write(hctx, rowsOf("stuck", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"))
	}()
	time.Sleep(100 * time.Millisecond)
	beside := healthy("b")
	cancel()
	<-done
	if beside > alone+time.Second {
		t.Errorf("60 rows at 20/s took %s beside a held batch, %s alone: the held batch spent the rate", beside, alone)
	}
}

// stuckGate cannot tell about the row "stuck" (its lookup fails).
type stuckGate struct{}

func (stuckGate) Generation() uint64 { return 1 }
func (stuckGate) Admits(_ context.Context, key string, _ sink.Source) (bool, error) {
	if key == "stuck" {
		return false, errors.New("injected: the lookup fails")
	}
	return true, nil
}

// A run of RESOURCE_EXHAUSTED refusals ends with the write that met it,
// however it ended: after an idle hour, one refusal is not an outage.
func TestThrottlingRunsDoNotCarryOver(t *testing.T) {
	dc, ac, proxy := faultyEmulator(t)
	tgt := sink.Target(testenv.Table(t, ac, dc, time.Hour))
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cfg := fastRetries()
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	var w *sink.Writer
	var outages atomic.Int32
	cfg.OnRetry = func(int, codes.Code, error) {
		if w.Outage() != nil {
			outages.Add(1)
		}
	}
	w, err := sink.NewWriter(dc, tgt, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		return testenv.MutateRowsFault{Refuse: status.Error(codes.ResourceExhausted, "injected")}
	})
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, _ = w.Write(short, rowsOf("a")) // ends with its context, refused throughout
	cancel()
	now.Add(int64(time.Hour))
	proxy.SetFault(refuseFirst(1, codes.ResourceExhausted))
	if res, err := w.Write(ctx, rowsOf("b")); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	if outages.Load() > 0 {
		t.Error("one RESOURCE_EXHAUSTED an idle hour after the last was reported as an outage")
	}
}
