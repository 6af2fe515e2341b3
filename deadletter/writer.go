package deadletter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/tick"
)

// defaultMaxMessageBytes is Kafka's default max.message.bytes, assumed when
// the topic's cannot be read.
const defaultMaxMessageBytes = 1048588

// recordBatchOverhead is the size of a record batch's header: the broker
// compares the whole batch with max.message.bytes.
const recordBatchOverhead = 61

// loudAfter is how long a produce error time should heal may last before
// it is reported like one it does not.
const loudAfter = time.Minute

// Writer produces rejected messages to the dead-letter topics,
// each to the one whose retention its payload may live (Topics).
// A dead letter always fits: the topics' max.message.bytes is learned at
// start-up (and again when the broker says a message is too large), and a
// dead letter larger than that is cut to fit. Produce errors are
// classified: those time heals are retried quietly; those it does not
// (authorization, a missing topic) are reported by Problem, for /readyz
// and the log, while the caller keeps retrying: the offsets wait,
// uncommitted, and nothing is lost.
type Writer struct {
	brokers   []string
	topics    Topics
	security  kafkaconn.Security
	transport *kafka.Transport
	client    *kafka.Client
	log       *slog.Logger
	sent      metric.Int64Counter
	truncated metric.Int64Counter
	now       func() time.Time
	keys      *Keys // sign letters when set
	// sourceIDs are the incarnations of the source topics (SetSourceID),
	// by topic: a letter of a record that does not say its own carries
	// its topic's.
	sourceIDs atomic.Pointer[map[string]string]

	// wmu guards the writer and the limit it was made for: a new limit
	// means a new writer (a writer's batch size is not to change in use).
	wmu   sync.RWMutex
	w     *kafka.Writer
	limit int64 // the smallest max.message.bytes of the topics

	mu sync.Mutex
	// state is each topic as the last check read it, in Names order.
	state []TopicRetention
	// grown are the topics whose keep grew under the worker, by name.
	grown map[string]growth
	// readKeeps is each topic's keep as the last check that read its
	// settings found it: a growth is measured from there, across checks
	// that could not read them.
	readKeeps map[string]time.Duration
	// checkProblem is what Check found, produceProblem what produces meet:
	// why dead letters cannot be produced, nil when they can.
	checkProblem, produceProblem error
	failingSince                 time.Time // of the produces failing in a row
	// inputParts is the input topic's partition count, once read.
	inputParts int
}

// NewWriter writes to topics. Each Write waits for all in-sync
// replicas: a dead-lettered offset is committed right after. Call Check
// before the first Write: until then every letter goes to the base topic
// without its payload.
func NewWriter(brokers []string, topics Topics, security kafkaconn.Security, mp metric.MeterProvider, log *slog.Logger) (*Writer, error) {
	transport, err := security.Transport()
	if err != nil {
		return nil, err
	}
	names := topics.Names()
	transport.MetadataTopics = names
	d := &Writer{
		brokers: brokers, topics: topics, security: security, transport: transport, log: log, now: time.Now,
		client: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport, Timeout: 10 * time.Second},
	}
	for _, n := range names {
		d.state = append(d.state, TopicRetention{Topic: n, Writable: "unknown"})
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
	for _, n := range names {
		attrs := topicAttrs(n)
		d.sent.Add(context.Background(), 0, attrs)
		d.truncated.Add(context.Background(), 0, attrs)
	}
	return d, nil
}

func topicAttrs(topic string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", topic))
}

// writer makes the producer for a topic limit: kafka-go accepts any batch
// whose estimated size fits under it, the batch's header included.
func (d *Writer) writer(maxMessageBytes int64) *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(d.brokers...),
		// Each message names its topic.
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
func (d *Writer) setLimit(maxMessageBytes int64) {
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

func (d *Writer) currentLimit() int64 {
	d.wmu.RLock()
	defer d.wmu.RUnlock()
	return d.limit
}

// Topics returns each dead-letter topic as the last check found it.
func (d *Writer) Topics() []TopicRetention {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.state)
}

// SetClock sets the clock letters are placed by: the host's, which a test
// may move. Call it before the first Write.
func (d *Writer) SetClock(now func() time.Time) { d.now = now }

// Problem returns why dead letters cannot be produced, nil when they can:
// what Check found, or a produce error that time does not heal, or one
// that should but has lasted loudAfter; and any topic whose keep grew over
// letters placed for a shorter one, until the new keep has passed over them.
func (d *Writer) Problem() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var grown []error
	now := d.now()
	for topic, g := range d.grown {
		if g.to > 0 && now.After(g.at.Add(g.to)) {
			delete(d.grown, topic) // every letter placed before is gone
			continue
		}
		grown = append(grown, fmt.Errorf("dead-letter topic %s keeps records up to %s since %s (was %s): letters placed there with their payload before may outlive their events; set retention.ms and segment.ms back, or delete the records placed before (kafka-delete-records.sh)",
			topic, keepText(g.to), g.at.UTC().Format(time.RFC3339), duration.Format(g.from)))
	}
	if d.checkProblem != nil {
		return errors.Join(append([]error{d.checkProblem}, grown...)...)
	}
	return errors.Join(append([]error{d.produceProblem}, grown...)...)
}

// produced records a produce's outcome: on success, to the topics in to.
func (d *Writer) produced(pe *ProduceError, to ...string) {
	d.mu.Lock()
	was := d.checkProblem != nil || d.produceProblem != nil
	if pe == nil {
		// Dead letters flow to these topics: whatever Check found there
		// (a denied write, a missing topic) is over too; a topic refused for
		// its retention is not written to, so stays refused, and one whose
		// settings could not be read stays so until a check reads them (a
		// letter without payload goes through all the same).
		var problems []error
		for i := range d.state {
			r := &d.state[i]
			if slices.Contains(to, r.Topic) && !r.refused && !r.unread {
				r.Problem = nil
			}
			if r.Problem != nil {
				problems = append(problems, r.Problem)
			}
		}
		d.checkProblem, d.produceProblem, d.failingSince = errors.Join(problems...), nil, time.Time{}
		now := d.checkProblem != nil
		d.mu.Unlock()
		if was && !now {
			d.log.Info("the dead-letter topics take dead letters again", "topics", to)
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

// Run checks the topics again every interval until ctx ends: /readyz
// follows a fix even when no dead letter is waiting, and a topic whose
// retention is changed under the worker (to forever, or longer than the
// letters it holds may live) is seen within an interval.
func (d *Writer) Run(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func(ctx context.Context) {
		d.mu.Lock()
		before := d.checkProblem
		d.mu.Unlock()
		_, err := d.Check(ctx)
		if ctx.Err() != nil {
			return // stopping: a check cut short says nothing
		}
		switch {
		case err != nil && (before == nil || before.Error() != err.Error()):
			d.log.Error("dead-letter topics cannot take dead letters; the letters bound for them wait, uncommitted", "err", err)
		case err == nil && before != nil:
			d.log.Info("dead-letter topics ready", "topics", d.topics.Names())
		}
	})
}

// ProduceError is a failed produce and what to do about it. A permanent
// one does not heal with time: someone must act (the Fix).
type ProduceError struct {
	Err       error
	Permanent bool
	Fix       string
	// Delivered, when not nil, says which of the letters given to Write
	// were produced all the same (the others' topics or partitions
	// failed).
	Delivered []bool
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

// SetSourceID names the incarnation (Kafka's topic id) of topic, the
// topic the letters' records are read from, which each letter of one
// that does not name its own then carries (HeaderSourceTopicID). The
// worker calls it at start, and again when it finds the topic created
// again.
func (d *Writer) SetSourceID(topic, id string) {
	ids := map[string]string{}
	if cur := d.sourceIDs.Load(); cur != nil {
		maps.Copy(ids, *cur)
	}
	ids[topic] = id
	d.sourceIDs.Store(&ids)
}

// SignWith makes every letter carry HeaderSignature under keys' first key.
// Call it before the first Write.
func (d *Writer) SignWith(keys *Keys) { d.keys = keys }

// letter is dl's message to topic under max bytes, placed at now: it says
// when (HeaderPlaced), a letter without its payload keeps no plain digest
// of the value (a keyed one when the writer has keys), and it is signed
// when the writer has keys (the room for both kept).
func (d *Writer) letter(dl Letter, topic string, now time.Time, max int64, payload bool) (kafka.Message, bool) {
	room := max - placedBytes
	if d.keys != nil {
		room -= signatureBytes
	}
	if ids := d.sourceIDs.Load(); ids != nil && dl.Msg.TopicID == "" {
		dl.Msg.TopicID = (*ids)[dl.Msg.Topic]
	}
	m, truncated := letterMessage(dl, room, payload)
	m.Topic = topic
	m.Headers = append(m.Headers, kafka.Header{Key: HeaderPlaced, Value: now.UTC().AppendFormat(nil, placedFormat)})
	if i := slices.IndexFunc(m.Headers, func(h kafka.Header) bool { return h.Key == HeaderOriginalSHA256 }); i >= 0 && !payload {
		var sum [sha256.Size]byte
		_, err := hex.Decode(sum[:], m.Headers[i].Value)
		m.Headers = slices.Delete(m.Headers, i, i+1)
		if err == nil && d.keys != nil {
			m.Headers = append(m.Headers, kafka.Header{Key: HeaderOriginalHMAC, Value: d.keys.originalMAC(sum)})
		}
	}
	if d.keys == nil {
		return m, truncated
	}
	hs := make([]signed, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = signed{h.Key, h.Value}
	}
	m.Headers = append(m.Headers, kafka.Header{Key: HeaderSignature, Value: d.keys.sign(topic, hs, m.Key, m.Value)})
	return m, truncated
}

// Write produces the dead letters, all or nothing as far as the caller is
// concerned: on error none may be treated as delivered. The error is a
// *ProduceError.
func (d *Writer) Write(ctx context.Context, dls []Letter) error {
	d.mu.Lock()
	state := slices.Clone(d.state)
	d.mu.Unlock()
	now := d.now()
	d.wmu.RLock()
	limit := d.limit
	msgs := make([]kafka.Message, len(dls))
	cut := map[string]int{}
	sent := map[string]int{}
	var to []string
	for i, dl := range dls {
		topic, payload := rangeTopic(state, now, dl)
		if r := state[slices.IndexFunc(state, func(r TopicRetention) bool { return r.Topic == topic })]; r.refused {
			d.wmu.RUnlock()
			return r.Problem // never written to: the letters wait until it is fixed
		}
		var truncated bool
		msgs[i], truncated = d.letter(dl, topic, now, limit-recordBatchOverhead, payload)
		// Stamped with the clock that placed it (kafka-go would stamp each
		// attempt anew, up to its retries later): the topic's keep counts
		// from this time, or the broker's later append (LogAppendTime).
		msgs[i].Time = now
		if truncated {
			cut[topic]++
		}
		if sent[topic]++; sent[topic] == 1 {
			to = append(to, topic)
		}
	}
	err := d.w.WriteMessages(ctx, msgs...)
	d.wmu.RUnlock()
	if err == nil {
		d.produced(nil, to...)
		for topic, n := range sent {
			d.sent.Add(ctx, int64(n), topicAttrs(topic))
			if cut[topic] > 0 {
				d.truncated.Add(ctx, int64(cut[topic]), topicAttrs(topic))
			}
		}
		return nil
	}
	pe := d.classify(ctx, err, to)
	pe.Err = fmt.Errorf("produce %d messages to dead-letter topics %s: %w", len(msgs), strings.Join(to, ", "), err)
	// kafka-go writes each topic and partition on its own: say which
	// letters went through, so that a retry does not produce them again.
	var perMessage kafka.WriteErrors
	if errors.As(err, &perMessage) && len(perMessage) == len(msgs) {
		pe.Delivered = make([]bool, len(msgs))
		for i, e := range perMessage {
			pe.Delivered[i] = e == nil
		}
	}
	d.produced(pe)
	return pe
}

// rangeTopic is where dl goes, and whether with its payload: an
// undecodable batch has none to keep, so goes to the base topic.
func rangeTopic(state []TopicRetention, now time.Time, dl Letter) (topic string, payload bool) {
	if dl.Undecodable != nil || dl.KeepUntil.IsZero() {
		return state[0].Topic, false
	}
	return place(state, now, dl.KeepUntil)
}

// classify sorts a produce error into what time heals and what it does not.
func (d *Writer) classify(ctx context.Context, err error, to []string) *ProduceError {
	topics := strings.Join(to, ", ")
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
			return &ProduceError{Fix: fmt.Sprintf("max.message.bytes of %s went down from %d to %d; retrying with smaller dead letters", topics, before, after)}
		}
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("the broker refuses dead letters cut to max.message.bytes %d of %s: check the broker's message.max.bytes", before, topics)}
	case errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.ClusterAuthorizationFailed), errors.Is(err, kafka.TransactionalIDAuthorizationFailed):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("grant this worker's principal WRITE on topic %s", topics)}
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return &ProduceError{Permanent: true, Fix: "check the SASL mechanism, user name and password"}
	case errors.Is(err, kafka.InvalidTopic):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("topic names %s: check --dlq-topic and --dlq-classes", topics)}
	case errors.Is(err, kafka.UnknownTopicOrPartition):
		// Also what a topic created a moment ago says, so it is loud only
		// once it has lasted: a topic deleted under the worker.
		return &ProduceError{Fix: fmt.Sprintf("create topic %s, or allow this worker to create it", topics)}
	case errors.Is(err, kafka.PolicyViolation), errors.Is(err, kafka.InvalidRecord), errors.Is(err, kafka.InvalidRequiredAcks):
		return &ProduceError{Permanent: true, Fix: fmt.Sprintf("the broker refuses records on %s: check its configuration", topics)}
	}
	return &ProduceError{}
}

// Close flushes and closes the producer.
func (d *Writer) Close() error {
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

// scope names the writer's metrics: the package they were first counted
// in, so that their series stay the same.
const scope = "github.com/cellttl/cellttl/ingest"

// meter is the package's meter of mp; a meter that records nothing when
// mp is nil.
func meter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(scope)
}
