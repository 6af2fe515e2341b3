// Package testenv gives tests a Kafka broker and a Bigtable emulator: the
// real ones started by scripts/services.sh when KAFKA_BROKERS and
// BIGTABLE_EMULATOR_HOST are set, in-process stand-ins (kfake, bttest)
// otherwise. Tests log which they got; none is skipped for want of one.
package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"go.uber.org/goleak"

	"github.com/cellttl/cellttl/internal/inproc"
)

// Real reports whether both real services are configured.
func Real() bool {
	return os.Getenv("KAFKA_BROKERS") != "" && os.Getenv("BIGTABLE_EMULATOR_HOST") != ""
}

// Kafka returns broker addresses: $KAFKA_BROKERS, or an in-process kfake
// cluster that ends with the test.
func Kafka(t testing.TB) []string {
	t.Helper()
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		t.Logf("Kafka: real broker at %s", b)
		return strings.Split(b, ",")
	}
	k, err := inproc.StartKafka(inproc.KafkaOptions{AutoCreate: true, DefaultPartitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	t.Logf("Kafka: in-process kfake at %v (set KAFKA_BROKERS for a real broker)", k.Brokers())
	return k.Brokers()
}

// Bigtable points BIGTABLE_EMULATOR_HOST at an emulator, the configured one
// or an in-process bttest server, and returns its address. The in-process
// server is one per test binary, started by the first test that asks and
// set in the process's environment for good: tests running in parallel
// share it (each on tables of its own), and t.Setenv, which a parallel
// test may not call, is not needed.
func Bigtable(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("BIGTABLE_EMULATOR_HOST"); addr != "" {
		t.Logf("Bigtable: emulator at %s", addr)
		return addr
	}
	inprocBigtable.once.Do(func() {
		bt, err := inproc.StartBigtable(inproc.BigtableOptions{})
		if err != nil {
			inprocBigtable.err = err
			return
		}
		inprocBigtable.bt, inprocBigtable.addr = bt, bt.Addr()
		inprocBigtable.err = os.Setenv("BIGTABLE_EMULATOR_HOST", bt.Addr())
	})
	if inprocBigtable.err != nil {
		t.Fatal(inprocBigtable.err)
	}
	// A test's t.Setenv of the variable, ended since, restored it to
	// empty: set it again.
	if err := os.Setenv("BIGTABLE_EMULATOR_HOST", inprocBigtable.addr); err != nil {
		t.Fatal(err)
	}
	t.Logf("Bigtable: in-process bttest at %s, shared by the package's tests (set BIGTABLE_EMULATOR_HOST for the emulator binary)", inprocBigtable.addr)
	return inprocBigtable.addr
}

// inprocBigtable is the test binary's in-process emulator, when no real one
// is configured; Main stops it once every test has run.
var inprocBigtable struct {
	once sync.Once
	bt   *inproc.Bigtable
	addr string
	err  error
}

// Main runs a package's tests, stops the in-process services they shared,
// removes the directories of what they built once (ScratchDir), then checks
// that every goroutine a test started has ended (goleak, with opts): the
// TestMain of a package whose tests use this kit.
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(sharedServices{m}, opts...)
}

// sharedServices runs the tests, then stops the shared in-process
// services, before goleak looks for goroutines left behind.
type sharedServices struct{ m *testing.M }

func (s sharedServices) Run() int {
	code := s.m.Run()
	if bt := inprocBigtable.bt; bt != nil {
		bt.Close()
	}
	removeScratch()
	return code
}

var seq atomic.Int64

// Name returns a name unique within the test binary run and across runs
// against the same long-lived services.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

// Clients opens Bigtable clients on the emulator, closed with the test.
func Clients(t testing.TB) (*bigtable.Client, *bigtable.AdminClient) {
	t.Helper()
	Bigtable(t)
	ctx := context.Background()
	dc, err := bigtable.NewClient(ctx, "local", "local")
	if err != nil {
		t.Fatal(err)
	}
	ac, err := bigtable.NewAdminClient(ctx, "local", "local")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close(); ac.Close() })
	return dc, ac
}

// Family names a table's column family: the shape of sink.Target, which a
// test converts it to (testenv imports no feature package).
type Family struct{ Table, Family string }

// Table creates a table and its family "c" with the GC rule max-age maxAge,
// in one ModifyColumnFamilies call as worker setup does (after which the
// emulator runs its GC on the table), and deletes the table when the test
// ends: the emulator never frees memory otherwise.
func Table(t testing.TB, ac *bigtable.AdminClient, _ *bigtable.Client, maxAge time.Duration) Family {
	t.Helper()
	tgt := Family{Table: Name("t"), Family: "c"}
	ctx := context.Background()
	if err := ac.CreateTable(ctx, tgt.Table); err != nil {
		t.Fatalf("create table %s: %v", tgt.Table, err)
	}
	if err := ac.CreateColumnFamilyWithConfig(ctx, tgt.Table, tgt.Family, bigtable.Family{GCPolicy: bigtable.MaxAgePolicy(maxAge)}); err != nil {
		t.Fatalf("create family %s:%s: %v", tgt.Table, tgt.Family, err)
	}
	t.Cleanup(func() { _ = ac.DeleteTable(context.Background(), tgt.Table) })
	return tgt
}

// TenantsYAML is the tenants file the worker's tests and the fault suite
// share: acme 1h, globex 3d, any other tenant the default 2d, written_at
// recorded.
const TenantsYAML = `strategy: default-expiration
default_ttl: 2d
record_real_timestamp: true
tenants:
  acme: 1h
  globex: 3d
`

// Get fetches url and returns its status and body: 0 and why when it
// cannot be reached (a server that may be down).
func Get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// MustGet is Get for a server that must answer: the test fails when it
// cannot be reached.
func MustGet(t testing.TB, url string) (int, string) {
	t.Helper()
	code, body := Get(url)
	if code == 0 {
		t.Fatalf("GET %s: %s", url, body)
	}
	return code, body
}

// Eventually polls cond until it holds or timeout passes; cond's message
// says what was seen when it gives up.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
