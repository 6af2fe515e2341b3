// Package telemetry sets up OpenTelemetry for the worker: metrics exported
// on a Prometheus endpoint and, when the standard OTEL_EXPORTER_OTLP_*
// variables are set, over OTLP; traces over OTLP only when configured. The
// other packages take a metric.MeterProvider (MeterProvider) and know
// nothing of exporters.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry owns the providers and the Prometheus registry.
type Telemetry struct {
	registry *prometheus.Registry
	meters   *sdkmetric.MeterProvider
	tracers  *sdktrace.TracerProvider // nil when traces are not exported
}

// Setup installs global meter and tracer providers and the W3C trace
// context propagator. The parts get the providers from MeterProvider and
// TracerProvider; the global ones are set too, for libraries that use
// them.
//
// version and revision name the build: the resource's service.version, and
// the gauge cellttl_build_info.
func Setup(ctx context.Context, version, revision string) (*Telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(serviceName()), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	t := &Telemetry{registry: prometheus.NewRegistry()}
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExp, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	if otlpConfigured("METRICS") {
		exp, err := metricExporter(ctx)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	t.meters = sdkmetric.NewMeterProvider(opts...)
	otel.SetMeterProvider(t.meters)
	if err := registerBuildInfo(t.meters.Meter("github.com/cellttl/cellttl/telemetry"), version, revision); err != nil {
		return nil, err
	}

	if otlpConfigured("TRACES") {
		exp, err := traceExporter(ctx)
		if err != nil {
			return nil, err
		}
		t.tracers = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		otel.SetTracerProvider(t.tracers)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return t, nil
}

// MeterProvider is the provider the worker's parts take their meters from.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meters }

// TracerProvider is the provider the parts take their tracers from. When
// traces are not exported it is the global one, which records nothing
// unless the program installed a provider of its own (as a test does).
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.tracers == nil {
		return otel.GetTracerProvider()
	}
	return t.tracers
}

// MetricsHandler serves the Prometheus exposition of every metric.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.tracers != nil {
		errs = append(errs, t.tracers.Shutdown(ctx))
	}
	errs = append(errs, t.meters.Shutdown(ctx))
	return errors.Join(errs...)
}

func serviceName() string {
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "cellttl"
}

// otlpConfigured reports whether an OTLP endpoint is set for the signal
// (METRICS or TRACES) or for all, and the signal's exporter is not "none".
func otlpConfigured(signal string) bool {
	if v := os.Getenv("OTEL_" + signal + "_EXPORTER"); v == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

func protocol(signal string) string {
	if p := os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"); p != "" {
		return p
	}
	if p := os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return "http/protobuf"
}

// The exporters read the rest of OTEL_EXPORTER_OTLP_* (endpoint, headers,
// TLS, timeout) themselves.
func metricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	var exp sdkmetric.Exporter
	var err error
	switch p := protocol("METRICS"); {
	case p == "grpc":
		exp, err = otlpmetricgrpc.New(ctx)
	case strings.HasPrefix(p, "http"):
		exp, err = otlpmetrichttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", p)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP metric exporter: %w", err)
	}
	return exp, nil
}

func traceExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch p := protocol("TRACES"); {
	case p == "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case strings.HasPrefix(p, "http"):
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", p)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// registerBuildInfo reports the build as a gauge of 1 whose labels say
// which: the usual way to see a fleet's versions, and a rollout's
// progress, in a dashboard.
func registerBuildInfo(m metric.Meter, version, revision string) error {
	info, err := m.Int64ObservableGauge("cellttl.build_info",
		metric.WithDescription("1, labelled with the release (version), the revision it was built from and the Go version"))
	if err != nil {
		return fmt.Errorf("register build info: %w", err)
	}
	attrs := metric.WithAttributes(attribute.String("version", version), attribute.String("revision", revision), attribute.String("go_version", runtime.Version()))
	if _, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(info, 1, attrs)
		return nil
	}, info); err != nil {
		return fmt.Errorf("register build info: %w", err)
	}
	return nil
}
