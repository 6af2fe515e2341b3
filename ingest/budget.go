package ingest

import "sync"

// budget bounds the bytes of fetched data the worker holds: a fetch reserves
// its response's size before it is sent, the messages it returns are held
// one by one, and each message's bytes come back when it is settled. One
// budget covers every partition, so memory is bounded by
// --max-inflight-bytes whatever the number of partitions or the size of the
// events, and a partition with nothing to read holds nothing. It needs
// only its limit set.
type budget struct {
	limit int64

	mu       sync.Mutex
	reserved int64  // for fetches not yet answered
	held     int64  // by messages not yet settled
	freed    signal // bytes came back
}

// Limit is the number of bytes the budget allows.
func (b *budget) Limit() int64 { return b.limit }

// Held is the number of bytes of fetched messages not yet settled.
func (b *budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// TryReserve takes as many free bytes as it can, up to most, if at least
// least are free, and returns how many it took. It never waits: when fewer
// than least are free it takes none and returns a channel closed when bytes
// next come back (registered in the same step, so that none is missed).
func (b *budget) TryReserve(least, most int64) (int64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	free := b.limit - b.reserved - b.held
	if free < least || free <= 0 {
		return 0, b.freed.wait()
	}
	n := min(free, most)
	b.reserved += n
	return n, nil
}

// Fill turns a reservation into the bytes of the messages its fetch
// returned, which may exceed it: Kafka returns a first record batch larger
// than the request's limit rather than make no progress. The next
// reservation then waits until the budget is back under its limit.
func (b *budget) Fill(reserved, held int64) {
	b.mu.Lock()
	b.reserved -= reserved
	b.held += held
	b.freed.fire()
	b.mu.Unlock()
}

// Release gives back the bytes of a settled message.
func (b *budget) Release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.freed.fire()
	b.mu.Unlock()
}

// signal tells a waiter that something happened (bytes came back, events
// settled), as a channel it can select on beside a timer or ctx. The
// channel is made when someone waits and closed at the next event: events
// are frequent (every settle), waiters rare, so an event no one waits for
// costs a nil check. Its owner's mutex guards it.
type signal struct{ ch chan struct{} }

// wait returns a channel closed at the next event.
func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire closes the channel of the waiters, if any.
func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
