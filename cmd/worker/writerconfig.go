package main

import (
	"cmp"
	"context"

	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/sink"
)

// writerConfig is --write-*'s configuration of the Bigtable writer, with
// what the worker's other parts tell it: the last failure for /status,
// what holds the writes, the erasure ledger's recheck of rows decided
// under an older one, and the write rate.
func (w *worker) writerConfig() sink.WriterConfig {
	wcfg := w.o.writer
	wcfg.OnRetry = func(rows int, code codes.Code, err error) { w.lastWriteErr.set(err) }
	// Under --strict-retention, a topic relaxed at run time (or whose
	// settings go unread) holds the writes as it refuses the start.
	wcfg.Held = func() error { return cmp.Or(w.rules.Held(), w.erasures.Held(), w.times.Problem()) }
	wcfg.Gate = erasureGate{w.erasures}
	// The cap follows the tenants file in force: an edit of
	// max_write_rate applies within a second, without a restart.
	wcfg.Throttle = sink.NewThrottle()
	wcfg.Throttle.Follow(func() float64 { return w.reloader.Current().WriteRate })
	return wcfg
}

// erasureGate is the erasure ledger as the writer's Gate: a row's source
// is where the ledger holds its record to the erasures' marks.
type erasureGate struct{ *erasure.Watch }

func (g erasureGate) Admits(ctx context.Context, key string, at sink.Source) (bool, error) {
	return g.Watch.Admits(ctx, key, erasure.Position{Topic: at.Topic, TopicID: at.TopicID, Partition: at.Partition, Offset: at.Offset})
}
