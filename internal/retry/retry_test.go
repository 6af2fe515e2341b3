package retry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestBackoffGrowsToItsCapAndStopsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		b := New(ctx, Policy{Initial: 100 * time.Millisecond, Max: time.Second})
		var waits []time.Duration
		for range 12 {
			start, next := time.Now(), b.Next()
			if !b.Wait() {
				t.Fatal("Wait gave up with the context alive")
			}
			if slept := time.Since(start); slept != next {
				t.Errorf("slept %s, Next said %s", slept, next)
			}
			waits = append(waits, next)
		}
		if b.Attempt() != 13 {
			t.Errorf("attempt %d after 12 waits, want 13", b.Attempt())
		}
		if waits[0] < 50*time.Millisecond || waits[0] > 150*time.Millisecond {
			t.Errorf("first wait %s, want about 100ms", waits[0])
		}
		for _, w := range waits {
			if w > 1500*time.Millisecond {
				t.Errorf("wait %s beyond the 1s cap and its jitter", w)
			}
		}
		if waits[11] < 500*time.Millisecond {
			t.Errorf("wait %s after 12 attempts: it does not grow", waits[11])
		}
		cancel()
		start := time.Now()
		if b.Wait() || time.Since(start) != 0 {
			t.Error("Wait slept after the context ended")
		}
	})
}

func TestLoopClassifiesCountsAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		l, err := NewLoop("op", Policy{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		if err != nil {
			t.Fatal(err)
		}
		permanent := errors.New("denied")
		l.Permanent = func(err error) bool { return errors.Is(err, permanent) }
		var seen []Failure
		l.OnFailure = func(_ context.Context, f Failure) { seen = append(seen, f) }
		n := 0
		err = l.Do(context.Background(), func(context.Context) error {
			n++
			switch n {
			case 1:
				return errors.New("leader moved")
			case 2:
				return permanent
			}
			return nil
		})
		if err != nil || n != 3 || len(seen) != 2 || seen[0].Permanent || !seen[1].Permanent || seen[1].Attempt != 2 {
			t.Fatalf("err %v, %d attempts, failures %+v", err, n, seen)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		counts := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					class, _ := dp.Attributes.Value("class")
					counts[m.Name+" "+class.AsString()] += dp.Value
				}
			}
		}
		if counts["cellttl.retries transient"] != 1 || counts["cellttl.retries permanent"] != 1 {
			t.Errorf("counted %v", counts)
		}

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		err = l.Do(ctx, func(context.Context) error { return permanent })
		if !errors.Is(err, context.Canceled) || !errors.Is(err, permanent) {
			t.Errorf("a loop that never succeeds ended with %v, want the last error and the context's", err)
		}
	})
}

// A curve's waits grow from Initial to Max, each jittered by at most half,
// and start over after Reset.
func TestCurve(t *testing.T) {
	c := Policy{Initial: 100 * time.Millisecond, Max: time.Second}.Curve()
	var waits []time.Duration
	for range 12 {
		waits = append(waits, c.Next())
	}
	if w := waits[0]; w < 50*time.Millisecond || w > 150*time.Millisecond {
		t.Errorf("first wait %s, want 100ms ± 50%%", w)
	}
	for _, w := range waits {
		if w > 1500*time.Millisecond {
			t.Errorf("a wait of %s past Max + 50%%", w)
		}
	}
	if w := waits[len(waits)-1]; w < 500*time.Millisecond {
		t.Errorf("twelfth wait %s, want near Max", w)
	}
	distinct := map[time.Duration]bool{}
	for _, w := range waits[8:] {
		distinct[w] = true
	}
	if len(distinct) < 2 {
		t.Errorf("waits at Max not jittered: %v", waits[8:])
	}
	c.Reset()
	if w := c.Next(); w > 150*time.Millisecond {
		t.Errorf("after Reset: %s, want 100ms ± 50%%", w)
	}
}
