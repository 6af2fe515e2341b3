package kafkaconn

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cellttl/cellttl/internal/tick"
	"github.com/cellttl/cellttl/internal/waitfor"
)

// A topic's id is Kafka's UUID of one incarnation of a topic name
// (Metadata v10 and later, Kafka 2.8): a topic deleted and created again,
// or the mirror a cluster fails over to, has another. Offsets mean nothing
// across incarnations, so an erasure's mark names the incarnation its end
// offsets are of.
//
// kafka-go speaks Metadata up to v8, which has no ids: the request is
// written and its answer read here with franz-go's kmsg, the wire types
// alone, on a connection set up as the Transport sets up its own (TLS, API
// versions, SASL).

// FollowTopicID reads topic's id every interval until ctx ends, and calls
// changed with the id read and the one before (known, at first) whenever
// they differ: a topic deleted and created again under a long-running
// reader. A read that fails, or finds no id, changes nothing.
func FollowTopicID(ctx context.Context, interval time.Duration, brokers []string, s Security, topic, known string, changed func(was, now string)) {
	tick.Every(ctx, interval, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if id, err := TopicID(ctx, brokers, s, topic); err == nil && id != "" && id != known {
			changed(known, id)
			known = id
		}
	})
}

// maxTopicIDAnswer bounds the broker's answer about one topic: a topic of
// thousands of partitions takes a few hundred KiB.
const maxTopicIDAnswer = 4 << 20

// TopicID returns topic's id, as Kafka writes it (base64, URL alphabet,
// no padding); "" when the broker gives none (one before Kafka 2.8).
func TopicID(ctx context.Context, brokers []string, s Security, topic string) (string, error) {
	r := NewTopicIDReader(brokers, s, topic)
	defer r.Close()
	return r.Read(ctx)
}

// TopicIDReader reads one topic's id as often as asked, over one
// connection it keeps: a reader that checks the id before every commit
// must not open a connection, with its TLS and SASL handshakes, each time.
// A read that fails on the kept connection (the broker closed it while
// idle, or went away) dials again, once. Safe for concurrent use.
type TopicIDReader struct {
	brokers []string
	s       Security
	topic   string

	mu          sync.Mutex
	pc          *protocol.Conn
	version     int16 // of Metadata; below 10 the broker gives no ids
	correlation int32
}

// NewTopicIDReader makes a reader of topic's id; it dials at its first
// read.
func NewTopicIDReader(brokers []string, s Security, topic string) *TopicIDReader {
	return &TopicIDReader{brokers: brokers, s: s, topic: topic}
}

// Read returns the topic's id, as TopicID does.
func (r *TopicIDReader) Read(ctx context.Context) (_ string, err error) {
	wait := waitfor.Begin(ctx, waitfor.Kafka, "the id of topic "+r.topic)
	defer func() { err = wait.End(err) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.pc != nil
	id, err := r.read(ctx)
	if err != nil && kept && ctx.Err() == nil {
		id, err = r.read(ctx)
	}
	return id, err
}

// read reads the id once, dialing first when no connection is kept, and
// closes the connection when the read fails: what is left on it is not
// to be trusted. r.mu is held.
func (r *TopicIDReader) read(ctx context.Context) (string, error) {
	if r.pc == nil {
		pc, newest, err := r.s.rawConn(ctx, r.brokers)
		if err != nil {
			return "", err
		}
		r.pc, r.version = pc, min(newest[protocol.Metadata], 12)
	}
	if r.version < 10 {
		return "", nil
	}
	res, err := r.ask(ctx)
	if err != nil {
		r.closeLocked()
		return "", err
	}
	return topicIDOf(res, r.topic) // an answer's own error keeps the connection
}

// ask writes one Metadata request for the topic and reads its answer.
func (r *TopicIDReader) ask(ctx context.Context) (*kmsg.MetadataResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	pc := r.pc
	_ = pc.SetDeadline(deadline)
	// The caller's end cuts the read short. The connection is the one of
	// this read (r.pc may be another by the time the cut runs), and once
	// cut it is not kept: the cut can come after the answer, and would
	// cut the next read on it.
	cut := context.AfterFunc(ctx, func() { _ = pc.SetDeadline(time.Now()) })
	defer func() {
		if !cut() {
			r.closeLocked()
		}
	}()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = r.version
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(r.topic)
	req.Topics = append(req.Topics, rt)
	r.correlation++
	if _, err := pc.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("cellttl")).AppendRequest(nil, req, r.correlation)); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", r.topic, err)
	}
	body, err := readAnswer(pc, r.correlation)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", r.topic, err)
	}
	res := req.ResponseKind().(*kmsg.MetadataResponse)
	if err := res.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", r.topic, err)
	}
	return res, nil
}

// Close closes the kept connection, if any.
func (r *TopicIDReader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeLocked()
}

func (r *TopicIDReader) closeLocked() {
	if r.pc != nil {
		_ = r.pc.Close()
		r.pc = nil
	}
}

// topicIDOf finds topic's id in a Metadata answer.
func topicIDOf(res *kmsg.MetadataResponse, topic string) (string, error) {
	for _, t := range res.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return "", fmt.Errorf("metadata of %s: %w", topic, kafka.Error(t.ErrorCode))
		}
		if t.TopicID == [16]byte{} {
			return "", nil
		}
		return base64.RawURLEncoding.EncodeToString(t.TopicID[:]), nil
	}
	return "", fmt.Errorf("metadata of %s: topic not in the answer", topic)
}

// readAnswer reads one answer of a flexible version: its size (at most
// maxTopicIDAnswer), its correlation id, which must be want, and its
// header's tagged fields; it returns the body.
func readAnswer(r io.Reader, want int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 5 || n > maxTopicIDAnswer {
		return nil, fmt.Errorf("an answer of %d bytes, want 5 to %d", n, maxTopicIDAnswer)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(b)); got != want {
		return nil, fmt.Errorf("an answer to request %d, want %d", got, want)
	}
	return skipTags(b[4:])
}

var errTags = errors.New("the answer's header tags do not fit it")

// skipTags skips a flexible header's tagged fields.
func skipTags(b []byte) ([]byte, error) {
	tags, k := binary.Uvarint(b)
	if k <= 0 || tags > uint64(len(b)) {
		return nil, errTags
	}
	b = b[k:]
	for range tags {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errTags
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, errTags
		}
		b = b[k+int(size):]
	}
	return b, nil
}
