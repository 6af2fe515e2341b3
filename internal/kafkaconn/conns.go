package kafkaconn

import (
	"context"
	"net"
	"sync"
	"time"
)

// Conns dials a Transport's connections (set Dial as its Dial) and
// remembers them, so that CloseAll can end them: a Kafka request cannot
// be cancelled, and a fetch's long poll in flight would keep its
// connection until the broker answers. Next dials the connections (a
// dialer with a 5 s timeout when nil).
type Conns struct {
	Next func(context.Context, string, string) (net.Conn, error)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Dial dials and remembers the connection.
func (s *Conns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := s.Next
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

// CloseAll closes every connection still open.
func (s *Conns) CloseAll() {
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
	set *Conns
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c.Conn)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
