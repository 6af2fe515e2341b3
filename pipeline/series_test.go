package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/cellttl/cellttl/tenants"
)

// Events of 100,000 listed tenants, of 1,000 unlisted ids and of broken
// ones leave every counter's series within the bound the tenants file
// sets (its metric_tenants, at most tenants.MaxMetricTenants, plus _rest,
// _unlisted and _other), no instrument reaches the SDK's cardinality
// limit (its overflow series), and no label is a value a producer chose.
// /status keeps each tenant's exact count: every listed tenant is counted.
func TestMetricSeriesAreBoundedByTheFile(t *testing.T) {
	const listed = 100_000
	var file strings.Builder
	file.WriteString("default_ttl: 2d\nmetric_tenants: [t-0, t-1, t-2]\ntenants:\n")
	for i := range listed {
		fmt.Fprintf(&file, "  t-%d: 1h\n", i)
	}
	cfg, err := tenants.Parse([]byte(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for i := range listed {
		values = append(values, fmt.Sprintf(`{"event_id":"e-%d","tenant_id":"t-%d"}`, i, i))
	}
	for i := range 1000 {
		values = append(values, fmt.Sprintf(`{"event_id":"u-%d","tenant_id":"chosen-%d"}`, i, i),
			fmt.Sprintf(`{"event_id":"b-%d","tenant_id":"forged-%d","occurred_at":"never"}`, i, i))
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p := New(DefaultConfig(), newSource(values...), &fakeWriter{}, &fakeDLQ{}, func() *tenants.Config { return cfg }, mp, nil, slog.New(slog.DiscardHandler))
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := p.Stats().Tenant("t-99999").Written.Load(); n != 1 {
			t.Errorf("t-99999's exact count %d, want 1 (it is no series, and still counted)", n)
		}
		labels := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok || !strings.HasPrefix(m.Name, "cellttl.events.") {
					continue // the counters by tenant (dead letters are by reason, a fixed set)
				}
				bound := 3 + 3 // t-0..t-2, _rest, _unlisted, _other
				if m.Name == "cellttl.events.ttl_clamped" {
					bound *= 2
				}
				if len(sum.DataPoints) > bound {
					t.Errorf("%s: %d series, want at most %d", m.Name, len(sum.DataPoints), bound)
				}
				for _, dp := range sum.DataPoints {
					if v, ok := dp.Attributes.Value("otel.metric.overflow"); ok && v.AsBool() {
						t.Errorf("%s reached the SDK's cardinality limit", m.Name)
					}
					if v, ok := dp.Attributes.Value("cellttl.tenant"); ok {
						labels[v.AsString()] = true
					}
				}
			}
		}
		if want := "map[_other:true _rest:true _unlisted:true t-0:true t-1:true t-2:true]"; fmt.Sprint(labels) != want {
			t.Errorf("tenant labels %v, want %s", labels, want)
		}
	})
}
