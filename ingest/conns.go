package ingest

import (
	"context"
	"net"
	"sync"
	"time"
)

// connSet dials the fetch transport's connections and remembers them, so
// that Close can end them: a Kafka request cannot be cancelled, and a long
// poll in flight would keep its connection for up to maxFetchWait.
type connSet struct {
	dial func(context.Context, string, string) (net.Conn, error)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *connSet) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := s.dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	c, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return &trackedConn{Conn: c, set: s}, nil
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	clear(s.conns)
}

// trackedConn leaves the set when it is closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c.Conn)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
