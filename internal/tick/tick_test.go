package tick

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// f runs once per interval, the first after one interval, never
// overlapping, and Every returns when ctx ends.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, func(context.Context) {
				at = append(at, time.Since(start))
				time.Sleep(2500 * time.Millisecond) // outlasts two intervals
			})
		}()
		time.Sleep(7 * time.Second)
		cancel()
		<-done
		// Calls at 1s, 3.5s (the ticker drops the ticks missed), 6s.
		want := []time.Duration{time.Second, 3500 * time.Millisecond, 6 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("calls at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("call %d at %v, want %v", i, at[i], want[i])
			}
		}
	})
}
