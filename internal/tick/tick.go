// Package tick runs periodic work: the watches and loops that read a
// setting again, commit, or refresh, every interval until they are told to
// stop.
package tick

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, the first time one interval
// after it is called. A call that outlasts the interval delays the next:
// calls never overlap. No call starts once ctx has ended, even when a tick
// was ready at the same moment.
func Every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return
			}
			f(ctx)
		}
	}
}
