package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Instruments created through the global API after Setup appear on the
// Prometheus endpoint, with the OTel names translated.
func TestPrometheusEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	tel, err := Setup(context.Background(), "1.2.3", "abcdef123456")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := otel.Meter("test").Int64Counter("cellttl.test.events")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !regexp.MustCompile(`(?m)^cellttl_test_events_total\{[^}]*\} 3$`).Match(body) {
		t.Errorf("metrics page lacks the counter at 3:\n%.2000s", body)
	}
	if !regexp.MustCompile(`(?m)^target_info\{.*service_name="cellttl"`).Match(body) {
		t.Error("no service name in target_info")
	}
	if !regexp.MustCompile(`(?m)^cellttl_build_info\{.*revision="abcdef123456".*version="1\.2\.3".*\} 1$`).Match(body) {
		t.Errorf("no cellttl_build_info naming the version and revision:\n%.2000s", body)
	}
	if !strings.Contains(string(body), "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
}

func TestOTLPProtocolChecked(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := Setup(context.Background(), "1.2.3", "abcdef123456"); err == nil || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Errorf("unknown protocol accepted: %v", err)
	}
}
