package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/tick"
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
	// HeaderTenant is the event's tenant when it was read; HeaderExpiresAt
	// when the event expires in Bigtable (RFC 3339 UTC, milliseconds), set
	// when it would have been written.
	HeaderTenant    = "cellttl.tenant"
	HeaderExpiresAt = "cellttl.expires_at"
	// HeaderPayload is "omitted" on a letter that keeps no payload (no
	// key, value or original headers; see DeadLetterTopics): its reason is
	// then the reason's class, since the sentence may quote the value.
	HeaderPayload = "cellttl.payload"
	// HeaderReasonClass is the reason's class (a cellttl_dead_letters_total
	// reason: not_json, invalid_id, unlisted_tenant…), for tools that sort
	// letters, such as worker redrive --reason.
	HeaderReasonClass = "cellttl.reason.class"

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
	// Class is the reason's class (a cellttl_dead_letters_total reason
	// label), said instead of Reason on a letter without its payload.
	Class string
	// Tenant is the event's tenant when tenants.yaml lists it, else "".
	Tenant string
	// ExpiresAt is when the event expires in Bigtable, zero when it would
	// not be written there.
	ExpiresAt time.Time
	// KeepUntil is when the letter's payload must be gone: ExpiresAt, or
	// the bound for events without a listed tenant. Zero keeps no payload.
	KeepUntil time.Time
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

// DeadLetterWriter produces rejected messages to the dead-letter topics,
// each to the one whose retention its payload may live (DeadLetterTopics).
// A dead letter always fits: the topics' max.message.bytes is learned at
// start-up (and again when the broker says a message is too large), and a
// dead letter larger than that is cut to fit. Produce errors are
// classified: those time heals are retried quietly; those it does not
// (authorization, a missing topic) are reported by Problem, for /readyz
// and the log, while the caller keeps retrying: the offsets wait,
// uncommitted, and nothing is lost.
type DeadLetterWriter struct {
	brokers   []string
	topics    DeadLetterTopics
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
	limit int64 // the smallest max.message.bytes of the topics

	mu sync.Mutex
	// state is each topic as the last check read it, in Names order.
	state []TopicRetention
	// grown are the topics whose keep grew under the worker, by name.
	grown map[string]growth
	// checkProblem is what Check found, produceProblem what produces meet:
	// why dead letters cannot be produced, nil when they can.
	checkProblem, produceProblem error
	failingSince                 time.Time // of the produces failing in a row
}

// NewDeadLetterWriter writes to topics. Each Write waits for all in-sync
// replicas: a dead-lettered offset is committed right after. Call Check
// before the first Write: until then every letter goes to the base topic
// without its payload.
func NewDeadLetterWriter(brokers []string, topics DeadLetterTopics, security Security, mp metric.MeterProvider, log *slog.Logger) (*DeadLetterWriter, error) {
	transport, err := security.Transport()
	if err != nil {
		return nil, err
	}
	names := topics.Names()
	transport.MetadataTopics = names
	d := &DeadLetterWriter{
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
func (d *DeadLetterWriter) writer(maxMessageBytes int64) *kafka.Writer {
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

// Check makes sure the dead-letter topics can take dead letters: each
// exists, or is created (with the broker's default partitions and
// replication, cleanup.policy=delete and its retention); its settings are
// read, and a topic that keeps records forever is refused unless accepted;
// max.message.bytes is learned; and the broker says this worker may write.
// It returns what it found, topic by topic; the error, also kept for
// Problem, joins every topic's problem and says the fix.
func (d *DeadLetterWriter) Check(ctx context.Context) ([]TopicRetention, error) {
	rs, err := d.check(ctx)
	d.mu.Lock()
	d.state, d.checkProblem = rs, err
	d.mu.Unlock()
	return rs, err
}

func (d *DeadLetterWriter) check(ctx context.Context) ([]TopicRetention, error) {
	names := d.topics.Names()
	prev := d.Topics()
	rs := make([]TopicRetention, len(names))
	for i, n := range names {
		rs[i] = TopicRetention{Topic: n, Writable: "unknown"}
	}
	md, err := d.client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		for i := range rs {
			keepReading(&rs[i], prev)
		}
		return d.failAll(rs, fmt.Errorf("dead-letter topics: %w", err))
	}
	create := d.topics.creation()
	var missing []kafka.TopicConfig
	for _, n := range names {
		if !d.known(md, n) {
			keep := create[n]
			missing = append(missing, kafka.TopicConfig{Topic: n, NumPartitions: -1, ReplicationFactor: -1, ConfigEntries: []kafka.ConfigEntry{
				{ConfigName: "cleanup.policy", ConfigValue: "delete"},
				{ConfigName: "retention.ms", ConfigValue: strconv.FormatInt(keep.Milliseconds(), 10)},
				{ConfigName: "segment.ms", ConfigValue: strconv.FormatInt(segmentFor(keep).Milliseconds(), 10)},
			}})
		}
	}
	if len(missing) > 0 {
		res, err := d.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: missing})
		for _, tc := range missing {
			i := slices.Index(names, tc.Topic)
			cerr := err
			if cerr == nil {
				cerr = res.Errors[tc.Topic]
			}
			switch {
			case cerr == nil:
				rs[i].Created = true
			case !errors.Is(cerr, kafka.TopicAlreadyExists):
				rs[i].Problem = &ProduceError{Err: fmt.Errorf("dead-letter topic %s does not exist and could not be created: %w", tc.Topic, cerr),
					Fix: fmt.Sprintf("create topic %s with cleanup.policy=delete and retention.ms=%d, or allow this worker to create topics", tc.Topic, create[tc.Topic].Milliseconds()), Permanent: true}
			}
		}
	}
	check, assumed := retentionCheck(ctx, d.client, md.Brokers)
	if assumed && (len(prev) == 0 || prev[0].Policy == "" || !prev[0].RetentionCheckAssumed) { // said once, not every check
		d.log.Warn("could not read every broker's log.retention.check.interval.ms; assuming at least Kafka's default", "assumed", duration.Format(check))
	}
	if describeErr := describeTopics(ctx, d.client, rs, check, assumed); describeErr != nil {
		d.log.Warn("could not read every dead-letter topic's settings; a topic keeps its last reading, and one never read gets letters without their payload", "err", describeErr)
	}
	for i := range rs {
		r := &rs[i]
		if r.Policy == "" {
			keepReading(r, prev)
		}
		if r.Policy == "" && r.Problem == nil {
			// Never read: letters go there without payload, and that is
			// said, not left to a warning.
			r.Problem = &ProduceError{Err: fmt.Errorf("the settings of dead-letter topic %s could not be read: its letters keep no payload", r.Topic),
				Fix: fmt.Sprintf("grant this worker's principal DESCRIBE_CONFIGS on topic %s", r.Topic)}
		}
		for _, p := range prev {
			if p.Topic == r.Topic && p.Policy != "" {
				d.keepChanged(r.Topic, p.Keeps, r.Keeps)
			}
		}
	}
	limit := int64(0)
	for i := range rs {
		r := &rs[i]
		if r.Problem != nil {
			continue
		}
		if r.MaxMessageBytes > recordBatchOverhead && (limit == 0 || r.MaxMessageBytes < limit) {
			limit = r.MaxMessageBytes
		}
		// A compacted topic refuses letters without a key: accepting it
		// would only wedge their partitions.
		if why := r.unbounded(); why != "" && (!d.topics.AcceptUnbounded || strings.Contains(r.Policy, "compact")) {
			r.refused = true
			r.Problem = &ProduceError{Err: fmt.Errorf("dead-letter topic %s: %s, past every tenant's TTL", r.Topic, why),
				Fix:       fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=delete,retention.ms=%d; or, for retention.ms=-1 only, accept it with --dlq-accept-unbounded (it then gets letters without their payload)", r.Topic, create[r.Topic].Milliseconds()),
				Permanent: true}
			continue
		}
		ok, known, err := d.security.mayWrite(ctx, d.brokers, r.Topic)
		switch {
		case err != nil:
			d.log.Warn("could not ask the broker whether a dead-letter topic is writable", "topic", r.Topic, "err", err)
		case known && !ok:
			r.Problem = &ProduceError{Err: fmt.Errorf("dead-letter topic %s is not writable by this worker: %w", r.Topic, kafka.TopicAuthorizationFailed),
				Fix: fmt.Sprintf("grant this worker's principal WRITE on topic %s", r.Topic), Permanent: true}
		case known:
			r.Writable = "yes"
		}
	}
	if limit == 0 {
		limit = d.currentLimit()
		d.log.Warn("could not read the dead-letter topics' max.message.bytes; dead letters are cut to the last known limit", "limit", limit)
	}
	d.setLimit(limit)
	var problems []error
	for _, r := range rs {
		if r.Problem != nil {
			problems = append(problems, r.Problem)
		}
	}
	return rs, errors.Join(problems...)
}

// keepReading gives r the last reading of its topic, if any: a check that
// could not read the settings (a broker restarting) leaves the placement
// as it was rather than taking every letter's payload.
func keepReading(r *TopicRetention, prev []TopicRetention) {
	for _, p := range prev {
		if p.Topic == r.Topic && p.Policy != "" {
			r.Retention, r.Segment, r.Policy, r.Keeps, r.RetentionCheck, r.MaxMessageBytes = p.Retention, p.Segment, p.Policy, p.Keeps, p.RetentionCheck, p.MaxMessageBytes
			r.refused = p.refused
		}
	}
}

// failAll gives every topic the same problem.
func (d *DeadLetterWriter) failAll(rs []TopicRetention, err error) ([]TopicRetention, error) {
	for i := range rs {
		rs[i].Problem = err
	}
	return rs, err
}

// known reports whether the metadata has the topic.
func (d *DeadLetterWriter) known(md *kafka.MetadataResponse, topic string) bool {
	for _, t := range md.Topics {
		if t.Name == topic {
			return t.Error == nil
		}
	}
	return false
}

// Topics returns each dead-letter topic as the last check found it.
func (d *DeadLetterWriter) Topics() []TopicRetention {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.state)
}

// learnLimit reads the topics' max.message.bytes again, keeping the last
// known one when it cannot.
func (d *DeadLetterWriter) learnLimit(ctx context.Context) int64 {
	d.mu.Lock()
	rs := slices.Clone(d.state)
	d.mu.Unlock()
	check, assumed := time.Duration(0), true
	if len(rs) > 0 {
		check, assumed = rs[0].RetentionCheck, rs[0].RetentionCheckAssumed
	}
	if err := describeTopics(ctx, d.client, rs, check, assumed); err != nil {
		d.log.Debug("re-reading the dead-letter topics' settings", "err", err)
	}
	limit := int64(0)
	for _, r := range rs {
		if r.MaxMessageBytes > recordBatchOverhead && (limit == 0 || r.MaxMessageBytes < limit) {
			limit = r.MaxMessageBytes
		}
	}
	if limit == 0 {
		return d.currentLimit()
	}
	d.setLimit(limit)
	return limit
}

// growth is a topic's keep grown under the worker: letters placed before
// at, for a keep of from, are kept up to to since.
type growth struct {
	at       time.Time
	from, to time.Duration
}

// keepChanged records a topic's keep going from was to now. Kafka applies
// new settings to the records already there: letters placed for the old
// keep outlive their events until the new keep has passed over them,
// unless the keep comes back.
func (d *DeadLetterWriter) keepChanged(topic string, was, now time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, had := d.grown[topic]
	switch {
	case had && (now <= g.from && now > 0):
		delete(d.grown, topic)
		d.log.Info("a dead-letter topic keeps its letters no longer than they were placed for again", "topic", topic, "keeps_up_to", duration.Format(now))
	case was > 0 && (now > was || now <= 0) && !had:
		if d.grown == nil {
			d.grown = map[string]growth{}
		}
		d.grown[topic] = growth{at: d.now(), from: was, to: now}
		d.log.Error("a dead-letter topic now keeps records longer than when letters were placed there with their payload: they outlive their events by up to the difference",
			"topic", topic, "keeps_up_to", keepText(now), "was", duration.Format(was),
			"fix", "set retention.ms and segment.ms back, or delete the records placed before the change (kafka-delete-records.sh)")
	case had:
		g.to = now
		d.grown[topic] = g
	}
}

func keepText(d time.Duration) string {
	if d <= 0 {
		return "forever"
	}
	return duration.Format(d)
}

// Problem returns why dead letters cannot be produced, nil when they can:
// what Check found, or a produce error that time does not heal, or one
// that should but has lasted loudAfter; and any topic whose keep grew over
// letters placed for a shorter one, until the new keep has passed over them.
func (d *DeadLetterWriter) Problem() error {
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
func (d *DeadLetterWriter) produced(pe *ProduceError, to ...string) {
	d.mu.Lock()
	was := d.checkProblem != nil || d.produceProblem != nil
	if pe == nil {
		// Dead letters flow to these topics: whatever Check found there
		// (a denied write, a missing topic) is over too; a topic refused for
		// its retention is not written to, so stays refused.
		var problems []error
		for i := range d.state {
			r := &d.state[i]
			if slices.Contains(to, r.Topic) && !r.refused {
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
func (d *DeadLetterWriter) Run(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func(ctx context.Context) {
		d.mu.Lock()
		before := d.checkProblem
		d.mu.Unlock()
		_, err := d.Check(ctx)
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

// Write produces the dead letters, all or nothing as far as the caller is
// concerned: on error none may be treated as delivered. The error is a
// *ProduceError.
func (d *DeadLetterWriter) Write(ctx context.Context, dls []DeadLetter) error {
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
		msgs[i], truncated = deadLetterMessage(dl, limit-recordBatchOverhead, payload)
		// Stamped with the clock that placed it (kafka-go would stamp each
		// attempt anew, up to its retries later): the topic's keep counts
		// from this time.
		msgs[i].Topic, msgs[i].Time = topic, now
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
func rangeTopic(state []TopicRetention, now time.Time, dl DeadLetter) (topic string, payload bool) {
	if dl.Undecodable != nil || dl.KeepUntil.IsZero() {
		return state[0].Topic, false
	}
	return place(state, now, dl.KeepUntil)
}

// classify sorts a produce error into what time heals and what it does not.
func (d *DeadLetterWriter) classify(ctx context.Context, err error, to []string) *ProduceError {
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

// deadLetterMessage builds the message for dl that fits under max bytes
// (estimated as kafka-go does, which is never less than the record's size
// in its batch). A message that does not fit keeps a prefix of its value,
// then if need be loses its original headers, then its key; the truncation
// headers record the original value's size and SHA-256 and what was left
// out. Without payload, it keeps none of the three, and the reason's class
// instead of its sentence.
func deadLetterMessage(dl DeadLetter, max int64, payload bool) (m kafka.Message, truncated bool) {
	src := dl.Msg
	var ts []byte
	if !src.Time.IsZero() {
		ts = src.Time.UTC().AppendFormat(nil, time.RFC3339Nano)
	}
	// A letter without its payload says the reason's class: the sentence
	// may quote the value. An undecodable batch's sentence quotes none.
	reason := dl.Reason
	if !payload && dl.Undecodable == nil && dl.Class != "" {
		reason = dl.Class
	}
	ours := []kafka.Header{
		{Key: HeaderReason, Value: []byte(reason)},
		{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
		{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(src.Partition), 10)},
		{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
		{Key: HeaderSourceTimestamp, Value: ts},
	}
	if dl.Field != "" {
		ours = append(ours, kafka.Header{Key: HeaderField, Value: []byte(dl.Field)})
	}
	if dl.Class != "" {
		ours = append(ours, kafka.Header{Key: HeaderReasonClass, Value: []byte(dl.Class)})
	}
	if dl.Tenant != "" {
		ours = append(ours, kafka.Header{Key: HeaderTenant, Value: []byte(dl.Tenant)})
	}
	if !dl.ExpiresAt.IsZero() {
		ours = append(ours, kafka.Header{Key: HeaderExpiresAt, Value: dl.ExpiresAt.UTC().AppendFormat(nil, "2006-01-02T15:04:05.000Z07:00")})
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
	if payload && dl.Cut == nil && messageSize(m) <= max {
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
	if !payload {
		return kafka.Message{Headers: append(append(ours, truncation...),
			kafka.Header{Key: HeaderDropped, Value: []byte("headers,key")},
			kafka.Header{Key: HeaderPayload, Value: []byte("omitted")})}, true
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
