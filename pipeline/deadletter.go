package pipeline

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/cellttl/cellttl/ingest"
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
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := p.dlq.Write(ctx, dls)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			p.log.Error("dead letters abandoned at the drain deadline; their events will be redelivered", "messages", len(dls), "err", err)
			return false
		}
		wait := bo.NextBackOff()
		p.log.Warn("dead-letter produce failed, retrying; offsets wait for it", "messages", len(dls), "backoff", wait, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}
