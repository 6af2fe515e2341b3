package bench

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Quantiles of what was observed between two scrapes, interpolated within
// the bucket as Prometheus's histogram_quantile does.
func TestHistogramQuantile(t *testing.T) {
	before := histogram{0.01: 10, 0.1: 10, 1: 20, math.Inf(1): 20}
	after := histogram{0.01: 60, 0.1: 100, 1: 120, math.Inf(1): 120}
	// Observed between: 50 below 10ms, 40 in (10ms, 100ms], 10 in (100ms, 1s].
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.25, 5 * time.Millisecond}, {0.50, 10 * time.Millisecond}, {0.70, 55 * time.Millisecond}, {0.99, 910 * time.Millisecond}} {
		if got := after.quantile(before, c.q); (got - c.want).Abs() > time.Millisecond {
			t.Errorf("q%.2f: %s, want %s", c.q, got, c.want)
		}
	}
	if got := before.quantile(before, 0.99); got != 0 {
		t.Errorf("nothing observed: %s, want 0", got)
	}
}

// The buckets as a worker's /metrics page has them, parsed: two series
// summed by bound, +Inf once.
func TestScrapeHistogram(t *testing.T) {
	page := `# TYPE d_seconds histogram
d_seconds_bucket{code="OK",le="0.1"} 3
d_seconds_bucket{code="OK",le="1"} 4
d_seconds_bucket{code="OK",le="+Inf"} 5
d_seconds_sum{code="OK"} 9
d_seconds_count{code="OK"} 5
d_seconds_bucket{code="Unavailable",le="0.1"} 0
d_seconds_bucket{code="Unavailable",le="1"} 1
d_seconds_bucket{code="Unavailable",le="+Inf"} 1
d_seconds_sum{code="Unavailable"} 0.5
d_seconds_count{code="Unavailable"} 1
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, page) }))
	defer srv.Close()
	h, err := scrapeHistogram(context.Background(), srv.URL, "d_seconds")
	if err != nil {
		t.Fatal(err)
	}
	want := histogram{0.1: 3, 1: 5, math.Inf(1): 6}
	if len(h) != len(want) || h[0.1] != 3 || h[1] != 5 || h[math.Inf(1)] != 6 {
		t.Errorf("buckets %v, want %v", h, want)
	}
}
