package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestEndpoints(t *testing.T) {
	var kafkaDown atomic.Bool
	var probes atomic.Int64
	checks := []Check{
		{Name: "kafka", Fn: func(context.Context) error {
			probes.Add(1)
			if kafkaDown.Load() {
				return errors.New("not in the consumer group")
			}
			return nil
		}},
		{Name: "config", Fn: func(context.Context) error { return nil }},
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") })
	s := New(Config{Addr: "127.0.0.1:0", ReadinessInterval: 50 * time.Millisecond}, metrics,
		func(q url.Values) any { return map[string]any{"partitions": 3, "tenants": q.Get("tenants")} }, checks, slog.New(slog.DiscardHandler))
	reader := sdkmetric.NewManualReader()
	if err := s.RegisterMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")); err != nil {
		t.Fatal(err)
	}
	if got := readyGauge(t, reader); got != "config=0 kafka=0" {
		t.Errorf("cellttl.ready before the first run: %s, want every check 0", got)
	}
	addr, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	base := "http://" + addr.String()

	if code, body := testenv.MustGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	testenv.Eventually(t, 5*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 200 && strings.Contains(body, "kafka: ok"), fmt.Sprintf("/readyz: %d %q", code, body)
	})
	if got := readyGauge(t, reader); got != "config=1 kafka=1" {
		t.Errorf("cellttl.ready while ready: %s", got)
	}
	kafkaDown.Store(true)
	testenv.Eventually(t, 5*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "kafka: not ready: not in the consumer group") && strings.Contains(body, "config: ok"),
			fmt.Sprintf("/readyz with kafka down: %d %q", code, body)
	})
	if got := readyGauge(t, reader); got != "config=1 kafka=0" {
		t.Errorf("cellttl.ready with kafka down: %s, want the failing check alone at 0", got)
	}
	if code, body := testenv.MustGet(t, base+"/status"); code != 200 || !strings.Contains(body, `"partitions": 3`) {
		t.Errorf("/status: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/status?tenants=true"); code != 200 || !strings.Contains(body, `"tenants": "true"`) {
		t.Errorf("/status?tenants=true: the query does not reach the page: %d %q", code, body)
	}
	if code, body := testenv.MustGet(t, base+"/metrics"); code != 200 || body != "m 1\n" {
		t.Errorf("/metrics: %d %q", code, body)
	}
	// No profiles on the admin port.
	if code, _ := testenv.MustGet(t, base+"/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ on the admin port: %d, want 404", code)
	}
}

// The checks run on their interval, whatever the requests: a hundred
// requests probe nothing. A check that hangs, ignoring its context, is
// reported and not waited for, and the server still shuts down.
func TestReadinessIsCached(t *testing.T) {
	var probes atomic.Int64
	hang := make(chan struct{})
	defer close(hang)
	checks := []Check{
		{Name: "bigtable", Fn: func(context.Context) error { probes.Add(1); return nil }},
		{Name: "stuck", Fn: func(context.Context) error { <-hang; return nil }},
	}
	s := New(Config{Addr: "127.0.0.1:0", ReadinessInterval: time.Hour}, nil, func(url.Values) any { return nil }, checks, slog.New(slog.DiscardHandler))
	addr, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "stuck: not ready: no answer within") && strings.Contains(body, "bigtable: ok"), fmt.Sprintf("/readyz %d: %q", code, body)
	})
	for range 100 {
		testenv.MustGet(t, base+"/readyz")
	}
	if n := probes.Load(); n != 1 {
		t.Errorf("the first run and 100 requests to /readyz ran the check %d times, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown with a check hanging: %v", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("a second shutdown: %v", err)
	}
}

// Profiles are served only when --pprof-addr asks, on their own listener,
// and a port alone is the loopback interface.
func TestPprofListener(t *testing.T) {
	if got := PprofListenAddr(":6060"); got != "127.0.0.1:6060" {
		t.Errorf(":6060 listens on %s, want the loopback interface", got)
	}
	if got := PprofListenAddr("0.0.0.0:6060"); got != "0.0.0.0:6060" {
		t.Errorf("an explicit host was changed: %s", got)
	}
	logs := &testenv.Buffer{}
	s := New(Config{Addr: "127.0.0.1:0", PprofAddr: ":0"}, nil, func(url.Values) any { return nil }, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if _, err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	m := regexp.MustCompile(`msg="pprof listening" addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil || !strings.HasPrefix(m[1], "127.0.0.1:") {
		t.Fatalf("pprof address: %q", logs.String())
	}
	if code, body := testenv.MustGet(t, "http://"+m[1]+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ on the pprof address: %d", code)
	}
}

func TestConfigValidateNamesTheFlag(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, ":8080": true, "127.0.0.1:0": true, "8080": false, "host": false, ":abc": false, ":70000": false} {
		err := Config{Addr: addr, ReadinessInterval: time.Second}.Validate()
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "--admin-addr")) {
			t.Errorf("%q: %v", addr, err)
		}
	}
	if err := (Config{PprofAddr: ":6060", ReadinessInterval: time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "--pprof-addr needs --admin-addr") {
		t.Errorf("--pprof-addr without the admin server: %v", err)
	}
}

// readyGauge is cellttl.ready as reader collects it, "check=value" sorted.
func readyGauge(t *testing.T, reader *sdkmetric.ManualReader) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "cellttl.ready" {
				continue
			}
			for _, p := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				check, _ := p.Attributes.Value("check")
				out = append(out, fmt.Sprintf("%s=%d", check.AsString(), p.Value))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
