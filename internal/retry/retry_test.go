package retry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
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
