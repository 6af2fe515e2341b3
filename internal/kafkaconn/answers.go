package kafkaconn

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A broker's answers are input too. kafka-go's decoder (its protocol
// package, which the Transport's clients use: metadata, offsets, topic
// settings, produce acknowledgements) allocates the array counts and byte
// lengths an answer claims before reading them: twenty bytes claiming an
// array of 2^31 entries ask for hundreds of gigabytes, and the process
// dies. checkedConn stands under the Transport's clients, beneath TLS, and
// hands on an answer only once franz-go's decoder (kmsg) has read it for
// the request it answers: kmsg refuses a count larger than the bytes left,
// so what kafka-go then allocates follows what the answer holds.
//
// Fetch answers pass through as they come: the fetcher reads them itself,
// as a stream, every length checked (package ingest/kwire).

// MaxAnswer bounds a broker's answer other than a fetch's: past it, the
// connection fails with an error naming the request. Metadata of a few
// thousand topics, or a group of hundreds of members, stays far below.
const MaxAnswer = 64 << 20

// ErrAnswer is the error of an answer refused: past MaxAnswer, or not
// decoding as an answer to its request.
var ErrAnswer = errors.New("a Kafka broker's answer is refused")

// checkedDial returns the Transport's Dial: TCP, then TLS when tlsCfg is
// set (the Transport's own TLS would sit above checkedConn, which must
// read the answers in clear), then checkedConn.
func checkedDial(tlsCfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tlsCfg != nil {
			cfg := tlsCfg
			if cfg.ServerName == "" {
				host, _, _ := net.SplitHostPort(addr)
				cfg = cfg.Clone()
				cfg.ServerName = host
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			conn = tc
		}
		return &checkedConn{Conn: conn, asked: map[int32]asked{}}, nil
	}
}

type asked struct{ key, version int16 }

// checkedConn reads each answer whole (up to MaxAnswer) and checks it
// before its reader sees a byte; it learns what each answer answers from
// the requests written (their headers: size, key, version, correlation
// id).
type checkedConn struct {
	net.Conn

	mu    sync.Mutex
	asked map[int32]asked

	// Of the request being written: its header's first bytes, and how many
	// bytes of it are still to come.
	head  [12]byte
	nhead int
	wleft int64

	// Of the answer being read: bytes checked and not yet handed on, and
	// how many of a fetch answer are still to come unchecked.
	pending []byte
	through int64
}

func (c *checkedConn) Write(p []byte) (int, error) {
	c.observe(p)
	return c.Conn.Write(p)
}

// observe follows the requests through the bytes written.
func (c *checkedConn) observe(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		if c.wleft > 0 {
			n := min(int64(len(p)), c.wleft)
			c.wleft -= n
			p = p[n:]
			continue
		}
		n := copy(c.head[c.nhead:], p)
		c.nhead += n
		p = p[n:]
		if c.nhead < len(c.head) {
			return
		}
		size := int64(int32(binary.BigEndian.Uint32(c.head[:4])))
		c.asked[int32(binary.BigEndian.Uint32(c.head[8:12]))] = asked{int16(binary.BigEndian.Uint16(c.head[4:6])), int16(binary.BigEndian.Uint16(c.head[6:8]))}
		c.nhead, c.wleft = 0, max(size-8, 0)
	}
}

func (c *checkedConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 && c.through == 0 {
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p[:min(int64(len(p)), c.through)])
	c.through -= int64(n)
	return n, err
}

// next reads the next answer's size and correlation id, and the answer
// whole unless it is a fetch's, and checks it.
func (c *checkedConn) next() error {
	var head [8]byte
	if _, err := io.ReadFull(c.Conn, head[:]); err != nil {
		return err
	}
	size := int64(int32(binary.BigEndian.Uint32(head[:4])))
	c.mu.Lock()
	id := int32(binary.BigEndian.Uint32(head[4:]))
	a, ok := c.asked[id]
	delete(c.asked, id)
	c.mu.Unlock()
	if size < 4 {
		return fmt.Errorf("%w: an answer of %d bytes", ErrAnswer, size)
	}
	if ok && a.key == int16(kmsg.Fetch) {
		c.pending, c.through = head[:], size-4
		return nil
	}
	if size > MaxAnswer {
		return fmt.Errorf("%w: an answer of %d bytes to %s, more than %d", ErrAnswer, size, name(a, ok), MaxAnswer)
	}
	body := make([]byte, 8+size-4)
	copy(body, head[:])
	if _, err := io.ReadFull(c.Conn, body[8:]); err != nil {
		return err
	}
	if ok {
		if err := check(a, body[8:]); err != nil {
			return fmt.Errorf("%w: the answer to %s: %v", ErrAnswer, name(a, ok), err)
		}
	}
	c.pending = body
	return nil
}

func name(a asked, ok bool) string {
	if !ok {
		return "a request not seen"
	}
	return fmt.Sprintf("%s v%d", kmsg.NameForKey(a.key), a.version)
}

// check reads b, an answer after its correlation id, as kmsg reads the
// answer to a: its header's tags, then its body.
func check(a asked, b []byte) error {
	resp := kmsg.ResponseForKey(a.key)
	if resp == nil {
		return nil // an API kmsg does not know: kafka-go does not send it
	}
	resp.SetVersion(a.version)
	if a.key == int16(kmsg.ApiVersions) {
		// Its header has no tags at any version, and a broker that does
		// not speak the version asked answers as version 0.
		if err := resp.ReadFrom(b); err == nil {
			return nil
		}
		resp.SetVersion(0)
		return resp.ReadFrom(b)
	}
	if resp.IsFlexible() {
		r := kbin.Reader{Src: b}
		for n := r.Uvarint(); n > 0 && r.Ok(); n-- {
			r.Uvarint()
			r.Span(int(r.Uvarint()))
		}
		if r.Complete() != nil {
			return errors.New("its header is cut short")
		}
		b = r.Src
	}
	return resp.ReadFrom(b)
}
