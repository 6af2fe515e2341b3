package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/retry"
)

// deadItem is a message on its way to the dead-letter topic.
type deadItem struct {
	dl     deadletter.Letter
	ack    ingest.Ack
	tenant *TenantStats
	// reason is the cellttl.dead_letters label: one of deadLetterReasons.
	reason string
	// who is whose data the letter copies, for the ledger at produce
	// time; erased is set when it dropped the letter.
	who    erasure.Subject
	erased bool
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
			if d.erased {
				d.tenant.Erased.Add(1)
			} else {
				d.tenant.DeadLettered.Add(1)
				p.metrics.deadLetters.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", d.reason)))
			}
			p.src.Done(d.ack)
		}
	}
}

// produceDeadLetters produces items through the retry loop; false when
// the drain deadline cut it short. Before each attempt the ledger in force
// judges the letters not yet produced (screen): a letter that waited out
// an outage of the dead-letter topic obeys the erasures recorded meanwhile.
func (p *Pipeline) produceDeadLetters(ctx context.Context, items []deadItem) bool {
	done := make([]bool, len(items)) // produced, or dropped by the ledger
	dls := make([]deadletter.Letter, 0, len(items))
	idx := make([]int, 0, len(items))
	err := p.dlqLoop.Do(ctx, func(ctx context.Context) error {
		if p.cfg.ErasuresHeld != nil {
			if err := p.cfg.ErasuresHeld(); err != nil {
				return fmt.Errorf("dead letters wait for the erasure ledger: %w", err)
			}
		}
		p.screen(items, done)
		dls, idx = dls[:0], idx[:0]
		for i := range items {
			if !done[i] {
				dls, idx = append(dls, items[i].dl), append(idx, i)
			}
		}
		if len(dls) == 0 {
			return nil
		}
		err := p.dlq.Write(ctx, dls)
		if err == nil {
			return nil
		}
		// Letters produced in a write that failed elsewhere are not sent
		// again: only those still missing are retried.
		var pe *deadletter.ProduceError
		if errors.As(err, &pe) && len(pe.Delivered) == len(dls) {
			left := 0
			for j, ok := range pe.Delivered {
				done[idx[j]] = done[idx[j]] || ok
				if !ok {
					left++
				}
			}
			if left == 0 {
				return nil
			}
		}
		return fmt.Errorf("produce %d dead letters: %w", len(dls), err)
	})
	if err != nil {
		p.log.Error("dead letters abandoned at the drain deadline; their events will be redelivered", "messages", len(dls), "err", err)
		return false
	}
	return true
}

// screen asks the ledger in force about each letter not yet produced: one
// of an erased user is dropped (settled as erased), one whose user could
// not be read loses its payload where an erasure could cover it.
func (p *Pipeline) screen(items []deadItem, done []bool) {
	ledger := p.ledger()
	if ledger.Len() == 0 {
		return
	}
	for i := range items {
		if done[i] {
			continue
		}
		switch ledger.Letter(items[i].who) {
		case erasure.DropLetter:
			items[i].erased, done[i] = true, true
		case erasure.LetterWithoutPayload:
			items[i].dl.KeepUntil = time.Time{}
		}
	}
}

// newDeadLetterLoop is the retry loop of dead-letter produces: permanent
// errors (authorization, a missing topic) are retried too, since the
// events must not be lost, but loudly: their offsets wait, uncommitted, and
// /readyz says why.
func newDeadLetterLoop(mp metric.MeterProvider, log *slog.Logger) (*retry.Loop, error) {
	l, err := retry.NewLoop("dead_letter.produce", retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second}, mp)
	if err != nil {
		return nil, err
	}
	l.Permanent = deadletter.IsPermanent
	l.OnFailure = func(_ context.Context, f retry.Failure) {
		if f.Permanent {
			log.Error("dead letters cannot be produced until this is fixed; their offsets and every later one of their partitions wait, uncommitted",
				"attempt", f.Attempt, "backoff", f.Next, "err", f.Err)
			return
		}
		log.Warn("dead-letter produce failed, retrying; offsets wait for it", "attempt", f.Attempt, "backoff", f.Next, "err", f.Err)
	}
	return l, nil
}
