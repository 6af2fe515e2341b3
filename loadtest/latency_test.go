package main

import (
	"math"
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
