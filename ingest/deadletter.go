package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Headers set on every dead-lettered message. The original key, value and
// headers are kept as they were, unless together they do not fit the
// dead-letter topic: then the value is cut (and if need be the original
// headers and key dropped), and the truncation headers say so.
const (
	HeaderReason          = "cellttl.reason"
	HeaderField           = "cellttl.field"
	HeaderSourceTopic     = "cellttl.source.topic"
	HeaderSourcePartition = "cellttl.source.partition"
	HeaderSourceOffset    = "cellttl.source.offset"
	// HeaderSourceTimestamp is the original record's timestamp (RFC 3339,
	// empty when it had none). The dead letter's own timestamp is the time
	// it is produced: a dead-letter topic that bounds timestamps
	// (message.timestamp.after.max.ms) would refuse the original's forever,
	// and a record timestamp out of bounds is one reason to dead-letter.
	HeaderSourceTimestamp = "cellttl.source.timestamp"

	HeaderTruncated      = "cellttl.truncated"       // "true"
	HeaderOriginalSize   = "cellttl.original.size"   // bytes of the original value
	HeaderOriginalSHA256 = "cellttl.original.sha256" // hex SHA-256 of the original value
	HeaderDropped        = "cellttl.dropped"         // "headers", "key" or "headers,key": what else was left out

	// A record batch the worker could not decode is one dead letter with
	// no key and no value: HeaderSourceOffset is its first offset (or the
	// first not delivered), and these say the rest.
	HeaderSourceOffsetLast = "cellttl.source.offset.last" // its last offset
	HeaderBatchCodec       = "cellttl.batch.codec"        // none, gzip, snappy, lz4 or zstd
	HeaderBatchSize        = "cellttl.batch.size"         // bytes of its records as stored, compressed
	HeaderBatchSHA256      = "cellttl.batch.sha256"       // hex SHA-256 of those bytes
)

// DeadLetter is a message set aside with the reason.
type DeadLetter struct {
	Msg    Message
	Reason string
	// Field is the event field at fault, "" when none is.
	Field string
	// Cut and Undecodable are the fetcher's, when Msg is a record it cut
	// or a batch it could not decode (see Fetched).
	Cut         *Cut
	Undecodable *Undecodable
}

// defaultMaxMessageBytes is Kafka's default max.message.bytes, assumed when
// the topic's cannot be read.
const defaultMaxMessageBytes = 1048588

// recordBatchOverhead is the size of a record batch's header: the broker
// compares the whole batch with max.message.bytes.
const recordBatchOverhead = 61

// loudAfter is how long a produce error time should heal may last before
// it is reported like one it does not.
const loudAfter = time.Minute

// DeadLetterWriter produces rejected messages to the dead-letter topic. A
// dead letter always fits: the topic's max.message.bytes is learned at
// start-up (and again when the broker says a message is too large), and a
// dead letter larger than that is cut to fit. Produce errors are
// classified: those time heals are retried quietly; those it does not
// (authorization, a missing topic) are reported by Problem, for /readyz
// and the log, while the caller keeps retrying: the offsets wait,
// uncommitted, and nothing is lost.
type DeadLetterWriter struct {
	brokers   []string
	topic     string
	security  Security
	transport *kafka.Transport
	client    *kafka.Client
	log       *slog.Logger
	sent      metric.Int64Counter
	truncated metric.Int64Counter
	now       func() time.Time

	// wmu guards the writer and the limit it was made for: a new limit
	// means a new writer (a writer's batch size is not to change in use).
	wmu   sync.RWMutex
	w     *kafka.Writer
	limit int64 // the topic's max.message.bytes

	mu sync.Mutex
	// checkProblem is what Check found, produceProblem what produces meet:
	// why dead letters cannot be produced, nil when they can.
	checkProblem, produceProblem error
	failingSince                 time.Time // of the produces failing in a row
}

// NewDeadLetterWriter writes to topic. Each Write waits for all in-sync
// replicas: a dead-lettered offset is committed right after. Call Check
// before the first Write.
func NewDeadLetterWriter(brokers []string, topic string, security Security, mp metric.MeterProvider, log *slog.Logger) (*DeadLetterWriter, error) {
	transport, err := security.Transport()
	if err != nil {
		return nil, err
	}
	transport.MetadataTopics = []string{topic}
	d := &DeadLetterWriter{
		brokers: brokers, topic: topic, security: security, transport: transport, log: log, now: time.Now,
		client: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport, Timeout: 10 * time.Second},
	}
	d.w, d.limit = d.writer(defaultMaxMessageBytes), defaultMaxMessageBytes
	meter := meter(mp)
	if d.sent, err = meter.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("messages produced to the dead-letter topic")); err != nil {
		return nil, fmt.Errorf("register dead-letter metrics: %w", err)
	}
	if d.truncated, err = meter.Int64Counter("cellttl.dead_letters.truncated", metric.WithUnit("{message}"),
		metric.WithDescription("dead letters cut to fit the dead-letter topic's max.message.bytes")); err != nil {
		return nil, fmt.Errorf("register dead-letter metrics: %w", err)
	}
	// Both exist from start-up, at 0, for rate(), alerts and dashboards.
	attrs := metric.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", topic))
	d.sent.Add(context.Background(), 0, attrs)
	d.truncated.Add(context.Background(), 0, attrs)
	return d, nil
}

// writer makes the producer for a topic limit: kafka-go accepts any batch
// whose estimated size fits under it, the batch's header included.
func (d *DeadLetterWriter) writer(maxMessageBytes int64) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(d.brokers...),
		Topic:        d.topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		BatchBytes:   maxMessageBytes - recordBatchOverhead,
		MaxAttempts:  3,
		Transport:    d.transport,
		// Check creates the topic when it is missing and the worker may;
		// a topic deleted later is reported, not silently recreated.
		AllowAutoTopicCreation: false,
	}
}

// setLimit records the topic's limit, with a writer made for it.
func (d *DeadLetterWriter) setLimit(maxMessageBytes int64) {
	d.wmu.Lock()
	if maxMessageBytes == d.limit {
		d.wmu.Unlock()
		return
	}
	old := d.w
	d.w, d.limit = d.writer(maxMessageBytes), maxMessageBytes
	d.wmu.Unlock()
	_ = old.Close() // no produce uses it any more: they hold wmu
}

func (d *DeadLetterWriter) currentLimit() int64 {
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	return d.limit
}

// TopicInfo is what Check found.
type TopicInfo struct {
	Topic           string
	Created         bool
	MaxMessageBytes int64
	// Writable is "yes", or "unknown" when the broker does not say.
	Writable string
}

// Check makes sure the dead-letter topic can take dead letters: it exists,
// or is created (with the broker's default partitions and replication);
// its max.message.bytes is learned; and the broker says this worker may
// write to it. An error is also kept for Problem.
func (d *DeadLetterWriter) Check(ctx context.Context) (TopicInfo, error) {
	info, err := d.check(ctx)
	d.mu.Lock()
	d.checkProblem = err
	d.mu.Unlock()
	return info, err
}

func (d *DeadLetterWriter) check(ctx context.Context) (TopicInfo, error) {
	info := TopicInfo{Topic: d.topic, Writable: "unknown"}
	exists, err := d.exists(ctx)
	if err != nil {
		return info, fmt.Errorf("dead-letter topic %s: %w", d.topic, err)
	}
	if !exists {
		res, err := d.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: d.topic, NumPartitions: -1, ReplicationFactor: -1}}})
		if err == nil {
			err = res.Errors[d.topic]
		}
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return info, &ProduceError{Err: fmt.Errorf("dead-letter topic %s does not exist and could not be created: %w", d.topic, err),
				Fix: fmt.Sprintf("create topic %s, or allow this worker to create topics", d.topic), Permanent: true}
		}
		info.Created = true
	}
	info.MaxMessageBytes = d.learnLimit(ctx)
	ok, known, err := d.security.mayWrite(ctx, d.brokers, d.topic)
	switch {
	case err != nil:
		d.log.Warn("could not ask the broker whether the dead-letter topic is writable", "topic", d.topic, "err", err)
	case known && !ok:
		return info, &ProduceError{Err: fmt.Errorf("dead-letter topic %s is not writable by this worker: %w", d.topic, kafka.TopicAuthorizationFailed),
			Fix: fmt.Sprintf("grant this worker's principal WRITE on topic %s", d.topic), Permanent: true}
	case known:
		info.Writable = "yes"
	}
	return info, nil
}

func (d *DeadLetterWriter) exists(ctx context.Context) (bool, error) {
	md, err := d.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{d.topic}})
	if err != nil {
		return false, err
	}
	for _, t := range md.Topics {
		if t.Name == d.topic {
			if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
				return false, nil
			}
			return t.Error == nil, t.Error
		}
	}
	return false, nil
}

// learnLimit reads the topic's max.message.bytes (its own, or the broker's
// default that it inherits), keeping the last known one when it cannot.
func (d *DeadLetterWriter) learnLimit(ctx context.Context) int64 {
	res, err := d.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: d.topic, ConfigNames: []string{"max.message.bytes"},
	}}})
	if err == nil && len(res.Resources) == 1 {
		err = res.Resources[0].Error
	}
	if err == nil {
		for _, e := range res.Resources[0].ConfigEntries {
			if e.ConfigName == "max.message.bytes" {
				if n, perr := strconv.ParseInt(e.ConfigValue, 10, 64); perr == nil && n > recordBatchOverhead {
					d.setLimit(n)
					return n
				}
			}
		}
		err = errors.New("max.message.bytes not in the answer")
	}
	n := d.currentLimit()
	d.log.Warn("could not read the dead-letter topic's max.message.bytes; dead letters are cut to the last known limit", "topic", d.topic, "limit", n, "err", err)
	return n
}

// Problem returns why dead letters cannot be produced, nil when they can:
// what Check found, or a produce error that time does not heal, or one
// that should but has lasted loudAfter.
func (d *DeadLetterWriter) Problem() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.checkProblem != nil {
		return d.checkProblem
	}
	return d.produceProblem
}

// produced records a produce's outcome.
func (d *DeadLetterWriter) produced(pe *ProduceError) {
	d.mu.Lock()
	was := d.checkProblem != nil || d.produceProblem != nil
	if pe == nil {
		// Dead letters flow: whatever Check found is over too.
		d.checkProblem, d.produceProblem, d.failingSince = nil, nil, time.Time{}
		d.mu.Unlock()
		if was {
			d.log.Info("the dead-letter topic takes dead letters again", "topic", d.topic)
		}
		return
	}
	now := d.now()
	if d.failingSince.IsZero() {
		d.failingSince = now
	}
	if failing := now.Sub(d.failingSince); pe.Permanent || failing >= loudAfter {
		if !pe.Permanent {
			pe.Err = fmt.Errorf("%w (failing for %s)", pe.Err, failing.Round(time.Second))
		}
		d.produceProblem = pe
	}
	d.mu.Unlock()
}

// Run checks again every interval while there is a problem, until ctx
// ends, so that /readyz follows a fix even when no dead letter is waiting.
func (d *DeadLetterWriter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.mu.Lock()
			checkFailed := d.checkProblem != nil
			d.mu.Unlock()
			if checkFailed {
				if _, err := d.Check(ctx); err == nil {
					d.log.Info("dead-letter topic ready", "topic", d.topic)
				}
			}
		}
	}
}

// ProduceError is a failed produce and what to do about it. A permanent
// one does not heal with time: someone must act (the Fix).
type ProduceError struct {
	Err       error
	Permanent bool
	Fix       string
}

func (e *ProduceError) Error() string {
	if e.Fix == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + "; " + e.Fix
}

func (e *ProduceError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is a produce failure time does not heal.
func IsPermanent(err error) bool {
	var pe *ProduceError
	return errors.As(err, &pe) && pe.Permanent
}

// Write produces the dead letters, all or nothing as far as the caller is
// concerned: on error none may be treated as delivered. The error is a
// *ProduceError.
func (d *DeadLetterWriter) Write(ctx context.Context, dls []DeadLetter) error {
	d.wmu.RLock()
	limit := d.limit
	msgs := make([]kafka.Message, len(dls))
	cut := 0
	for i, dl := range dls {
		var truncated bool
		if msgs[i], truncated = deadLetterMessage(dl, limit-recordBatchOverhead); truncated {
			cut++
		}
	}
	err := d.w.WriteMessages(ctx, msgs...)
	d.wmu.RUnlock()
	if err == nil {
		d.produced(nil)
		attrs := metric.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", d.topic))
		d.sent.Add(ctx, int64(len(msgs)), attrs)
		if cut > 0 {
			d.truncated.Add(ctx, int64(cut), attrs)
		}
		return nil
	}
	pe := d.classify(ctx, err)
	pe.Err = fmt.Errorf("produce %d messages to dead-letter topic %s: %w", len(msgs), d.topic, err)
	d.produced(pe)
	return pe
}

// classify sorts a produce error into what time heals and what it does not.
func (d *DeadLetterWriter) classify(ctx context.Context, err error) *ProduceError {
	var perMessage kafka.WriteErrors
	if errors.As(err, &perMessage) {
		for _, e := range perMessage {
			if e != nil {
				err = e // they share a cause: one topic, one batch
				break
			}
		}
	}
	var tooLarge kafka.MessageTooLargeError
	switch {
	case errors.As(err, &tooLarge), errors.Is(err, kafka.MessageSizeTooLarge), errors.Is(err, kafka.RecordListTooLarge):
		// The topic's limit went down since it was learned: learn it again,
		// and the next attempt cuts the dead letters to the new one.
		before := d.currentLimit()
		if after := d.learnLimit(ctx); after < before {
			return &ProduceError{Fix: fmt.Sprintf("max.message.bytes of %s went down from %d to %d; retrying with smaller dead letters", d.topic, before, after)}
		}
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("the broker refuses dead letters cut to max.message.bytes %d of %s: check the broker's message.max.bytes", before, d.topic)}
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.ClusterAuthorizationFailed), errors.Is(err, kafka.TransactionalIDAuthorizationFailed):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("grant this worker's principal WRITE on topic %s", d.topic)}
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return &ProduceError{Permanent: true, Fix: "check the SASL mechanism, user name and password"}
	case errors.Is(err, kafka.InvalidTopic):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("topic name %s is invalid: check --dlq-topic", d.topic)}
	case errors.Is(err, kafka.UnknownTopicOrPartition):
		// Also what a topic created a moment ago says, so it is loud only
		// once it has lasted: a topic deleted under the worker.
		return &ProduceError{Fix: fmt.Sprintf("create topic %s, or allow this worker to create it", d.topic)}
	case errors.Is(err, kafka.PolicyViolation), errors.Is(err, kafka.InvalidRecord), errors.Is(err, kafka.InvalidRequiredAcks):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("the broker refuses records on %s: check its configuration", d.topic)}
	}
	return &ProduceError{}
}

// deadLetterMessage builds the message for dl that fits under max bytes
// (estimated as kafka-go does, which is never less than the record's size
// in its batch). A message that does not fit keeps a prefix of its value,
// then if need be loses its original headers, then its key; the truncation
// headers record the original value's size and SHA-256 and what was left
// out.
func deadLetterMessage(dl DeadLetter, max int64) (m kafka.Message, truncated bool) {
	src := dl.Msg
	var ts []byte
	if !src.Time.IsZero() {
		ts = src.Time.UTC().AppendFormat(nil, time.RFC3339Nano)
	}
	ours := []kafka.Header{
		{Key: HeaderReason, Value: []byte(dl.Reason)},
		{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(src.Partition), 10)},
		{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
		{Key: HeaderSourceTimestamp, Value: ts},
	}
	if dl.Field != "" {
		ours = append(ours, kafka.Header{Key: HeaderField, Value: []byte(dl.Field)})
	}
	if u := dl.Undecodable; u != nil {
		return kafka.Message{Headers: append(ours,
			kafka.Header{Key: HeaderSourceOffsetLast, Value: strconv.AppendInt(nil, u.Last, 10)},
			kafka.Header{Key: HeaderBatchCodec, Value: []byte(u.Codec)},
			kafka.Header{Key: HeaderBatchSize, Value: strconv.AppendInt(nil, int64(u.Size), 10)},
			kafka.Header{Key: HeaderBatchSHA256, Value: []byte(hex.EncodeToString(u.SHA256[:]))},
		)}, false
	}
	theirs := make([]kafka.Header, len(src.Headers), len(src.Headers)+len(ours)+4)
	for i, h := range src.Headers {
		theirs[i] = kafka.Header{Key: h.Key, Value: h.Value}
	}
	m = kafka.Message{Key: src.Key, Value: src.Value, Headers: append(theirs, ours...)}
	if dl.Cut == nil && messageSize(m) <= max {
		return m, false
	}
	// Cut here, or by the fetcher already (which hashed all of the value
	// and may have left out the key or headers).
	size, sum, fetcherDropped := int64(len(src.Value)), [sha256.Size]byte{}, ""
	if c := dl.Cut; c != nil {
		size, sum, fetcherDropped = c.Size, c.SHA256, c.Dropped
	} else {
		sum = sha256.Sum256(src.Value)
	}
	truncation := []kafka.Header{
		{Key: HeaderTruncated, Value: []byte("true")},
		{Key: HeaderOriginalSize, Value: strconv.AppendInt(nil, size, 10)},
		{Key: HeaderOriginalSHA256, Value: []byte(hex.EncodeToString(sum[:]))},
	}
	for _, drop := range []string{"", "headers", "headers,key"} {
		m = kafka.Message{Key: src.Key}
		m.Headers = append(append([]kafka.Header{}, ours...), truncation...)
		if drop == "" {
			m.Headers = append(theirs[:len(src.Headers):len(src.Headers)], m.Headers...)
		}
		if drop == "headers,key" {
			m.Key = nil
		}
		if dropped := droppedParts(fetcherDropped, drop); dropped != "" {
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderDropped, Value: []byte(dropped)})
		}
		if room := max - messageSize(m); room >= 0 {
			m.Value = src.Value[:min(int64(len(src.Value)), room)]
			return m, true
		}
	}
	return m, true // our own headers alone are larger than the topic allows: the broker will say so
}

// droppedParts is the HeaderDropped value for what the fetcher and the
// dead-letter writer left out, each "", "key", "headers" or "headers,key".
func droppedParts(a, b string) string {
	headers := strings.Contains(a, "headers") || strings.Contains(b, "headers")
	key := strings.Contains(a, "key") || strings.Contains(b, "key")
	switch {
	case headers && key:
		return "headers,key"
	case headers:
		return "headers"
	case key:
		return "key"
	}
	return ""
}

// messageSize bounds from above what kafka-go counts for a message against
// Writer.BatchBytes, and so the record's size in its batch: the v1 message
// layout (crc, magic, attributes, key and value lengths, timestamp) and
// each header with 5-byte length prefixes, the largest a varint of an int32
// takes.
func messageSize(m kafka.Message) int64 {
	n := int64(4+1+1+4+len(m.Key)+4+len(m.Value)+8) + 5
	for _, h := range m.Headers {
		n += int64(5 + len(h.Key) + 5 + len(h.Value))
	}
	return n
}

// Close flushes and closes the producer.
func (d *DeadLetterWriter) Close() error {
	d.wmu.Lock()
	err := d.w.Close()
	d.wmu.Unlock()
	// The transport's connections and their goroutines go with it.
	d.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close dead-letter writer: %w", err)
	}
	return nil
}
