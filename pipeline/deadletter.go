package pipeline

import (
	"context"
	"time"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/retry"
)

// deadItem is a message on its way to the dead-letter topic.
type deadItem struct {
	dl     ingest.DeadLetter
	ack    ingest.Ack
	tenant *TenantStats
}

// maxDeadLetterBatch bounds one produce to the dead-letter topic.
const maxDeadLetterBatch = 500

// deadLetterLoop produces dead letters in small batches until dead closes.
// A failed produce is retried with backoff until ctx ends; until it
// succeeds its offsets stay unsettled, and with them every later offset of
// their partitions.
func (p *Pipeline) deadLetterLoop(ctx context.Context, dead <-chan deadItem) {
	buf := make([]deadItem, 0, maxDeadLetterBatch)
	for first := range dead {
		buf = append(buf[:0], first)
		// Take what is already queued: a burst of bad events goes out in one
		// produce, a lone one without waiting.
	more:
		for len(buf) < maxDeadLetterBatch {
			select {
			case d, ok := <-dead:
				if !ok {
					break more
				}
				buf = append(buf, d)
			default:
				break more
			}
		}
		if !p.produceDeadLetters(ctx, buf) {
			continue
		}
		for _, d := range buf {
			d.tenant.DeadLettered.Add(1)
			p.src.Done(d.ack)
		}
	}
}

func (p *Pipeline) produceDeadLetters(ctx context.Context, items []deadItem) bool {
	dls := make([]ingest.DeadLetter, len(items))
	for i, d := range items {
		dls[i] = d.dl
	}
	b := retry.New(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second})
	for {
		err := p.dlq.Write(ctx, dls)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			p.log.Error("dead letters abandoned at the drain deadline; their events will be redelivered", "messages", len(dls), "err", err)
			return false
		}
		if ingest.IsPermanent(err) {
			// Retrying cannot fix this, but the events must not be lost:
			// their offsets wait, uncommitted, and /readyz says why.
			p.log.Error("dead letters cannot be produced until this is fixed; their offsets and every later one of their partitions wait, uncommitted",
				"messages", len(dls), "attempt", b.Attempt(), "backoff", b.Next(), "err", err)
		} else {
			p.log.Warn("dead-letter produce failed, retrying; offsets wait for it", "messages", len(dls), "attempt", b.Attempt(), "backoff", b.Next(), "err", err)
		}
		if !b.Wait() {
			return false
		}
	}
}
