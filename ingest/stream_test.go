package ingest

import (
	"context"
	"sync"
)

// stream hands out a consumer's messages one at a time, from the chunks
// Poll returns: how the tests read them.
type stream struct {
	batch []Fetched
	next  int
}

var (
	streamsMu sync.Mutex
	streams   = map[*Consumer]*stream{}
)

// streamOf is c's stream: a test reads on where it stopped.
func streamOf(c *Consumer) *stream {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	s := streams[c]
	if s == nil {
		s = &stream{}
		streams[c] = s
	}
	return s
}

// fetch returns c's next message, as Poll does a chunk at a time. A message
// that went stale since its chunk was polled (a rebalance between two
// calls) is settled and skipped, as Poll skips it.
func fetch(ctx context.Context, c *Consumer) (Message, Ack, error) {
	s := streamOf(c)
	for {
		if s.next == len(s.batch) {
			b, err := c.Poll(ctx, s.batch)
			if err != nil {
				s.batch, s.next = nil, 0
				return Message{}, Ack{}, err
			}
			s.batch, s.next = b, 0
		}
		f := s.batch[s.next]
		s.next++
		if !f.Ack.a.Stale() {
			return f.Msg, f.Ack, nil
		}
		c.Done(f.Ack)
	}
}
