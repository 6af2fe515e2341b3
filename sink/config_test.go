package sink

import (
	"testing"

	"cloud.google.com/go/bigtable"
)

// The Bigtable client's built-in metrics go to Cloud Monitoring only when
// the operator asks, and never from an emulator, which has none.
func TestClientMetricsOnlyWhenAsked(t *testing.T) {
	for _, c := range []struct {
		asked    bool
		emulator string
		want     bigtable.MetricsProvider
	}{
		{false, "", bigtable.NoopMetricsProvider{}},
		{true, "", bigtable.DefaultMetricsProvider{}},
		{true, "127.0.0.1:8086", bigtable.NoopMetricsProvider{}},
		{false, "127.0.0.1:8086", bigtable.NoopMetricsProvider{}},
	} {
		t.Setenv("BIGTABLE_EMULATOR_HOST", c.emulator)
		if got := (TableConfig{ClientMetrics: c.asked}).metricsProvider(); got != c.want {
			t.Errorf("--bigtable-client-metrics %t, BIGTABLE_EMULATOR_HOST %q: %T, want %T", c.asked, c.emulator, got, c.want)
		}
	}
}
