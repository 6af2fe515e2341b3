package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/duration"
)

// Check makes sure the dead-letter topics can take dead letters: each
// exists, or is created (with the input topic's partitions and 3
// replicas, or the flags', cleanup.policy=delete and its retention), an
// existing one's partitions and replicas are checked; its settings are
// read, and a topic that keeps records forever is refused unless accepted;
// max.message.bytes is learned; and the broker says this worker may write.
// It returns what it found, topic by topic; the error, also kept for
// Problem, joins every topic's problem and says the fix.
func (d *Writer) Check(ctx context.Context) ([]TopicRetention, error) {
	rs, err := d.check(ctx)
	if ctx.Err() != nil {
		// Cut short (the worker is stopping): what was read is partial,
		// and an unread topic is not a topic with a problem.
		return d.Topics(), fmt.Errorf("dead-letter topics: check cut short: %w", context.Cause(ctx))
	}
	d.mu.Lock()
	d.state, d.checkProblem = rs, err
	d.mu.Unlock()
	return rs, err
}

func (d *Writer) check(ctx context.Context) ([]TopicRetention, error) {
	names := d.topics.Names()
	prev := d.Topics()
	rs := make([]TopicRetention, len(names))
	for i, n := range names {
		rs[i] = TopicRetention{Topic: n, Writable: "unknown"}
	}
	md, err := d.client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		// No reading: letters keep no payload until one (see readSettings).
		return d.failAll(rs, fmt.Errorf("dead-letter topics: %w", err))
	}
	parts, rf := d.shape(ctx, md)
	d.createMissing(ctx, md, rs, parts, rf)
	d.readSettings(ctx, md, rs, prev)
	d.checkShape(md, rs, prev, parts, rf)
	limit := int64(0)
	for i := range rs {
		r := &rs[i]
		if r.Problem != nil {
			continue
		}
		if r.MaxMessageBytes > recordBatchOverhead && (limit == 0 || r.MaxMessageBytes < limit) {
			limit = r.MaxMessageBytes
		}
		d.judge(ctx, r)
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

// createMissing creates the topics of rs the metadata does not have, each
// with cleanup.policy=delete, its retention, a segment.ms to match and
// message.timestamp.type=LogAppendTime; a
// topic that cannot be created gets its problem.
func (d *Writer) createMissing(ctx context.Context, md *kafka.MetadataResponse, rs []TopicRetention, parts, rf int) {
	create := d.topics.creation()
	var missing []kafka.TopicConfig
	for _, r := range rs {
		if !d.known(md, r.Topic) {
			keep := create[r.Topic]
			missing = append(missing, kafka.TopicConfig{Topic: r.Topic, ConfigEntries: []kafka.ConfigEntry{
				{ConfigName: "cleanup.policy", ConfigValue: "delete"},
				{ConfigName: "retention.ms", ConfigValue: strconv.FormatInt(keep.Milliseconds(), 10)},
				{ConfigName: "segment.ms", ConfigValue: strconv.FormatInt(segmentFor(keep).Milliseconds(), 10)},
				// The broker's clock, not a producer's, then says how long
				// a segment stays (see Topics).
				{ConfigName: "message.timestamp.type", ConfigValue: "LogAppendTime"},
			}})
		}
	}
	if len(missing) == 0 {
		return
	}
	for i := range missing {
		missing[i].NumPartitions, missing[i].ReplicationFactor = parts, rf
	}
	res, err := d.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: missing})
	for _, tc := range missing {
		i := slices.IndexFunc(rs, func(r TopicRetention) bool { return r.Topic == tc.Topic })
		cerr := err
		if cerr == nil {
			cerr = res.Errors[tc.Topic]
		}
		switch {
		case cerr == nil:
			rs[i].Created = true
			rs[i].Partitions, rs[i].Replicas = max(tc.NumPartitions, 0), max(tc.ReplicationFactor, 0)
		case !errors.Is(cerr, kafka.TopicAlreadyExists):
			rs[i].Problem = &ProduceError{Err: fmt.Errorf("dead-letter topic %s does not exist and could not be created: %w", tc.Topic, cerr),
				Fix: fmt.Sprintf("create topic %s with cleanup.policy=delete and retention.ms=%d, or allow this worker to create topics", tc.Topic, create[tc.Topic].Milliseconds()), Permanent: true}
		}
	}
}

// shape is the partitions and replication factor a dead-letter topic is
// created with, and an existing one is checked against: the flags', else
// the input topic's partitions and 3 replicas, capped at the brokers the
// metadata lists (one on a single-broker cluster). A value that cannot be
// learned is the broker's default (-1), which the log says: Apache
// Kafka's are one partition and one replica, where a burst of bad events
// queues and a broker's loss loses letters.
func (d *Writer) shape(ctx context.Context, md *kafka.MetadataResponse) (partitions, replicationFactor int) {
	partitions, replicationFactor = d.topics.Partitions, d.topics.ReplicationFactor
	if replicationFactor == 0 {
		replicationFactor = min(DefaultReplicationFactor, len(md.Brokers))
		if replicationFactor == 0 {
			replicationFactor = -1
		}
	}
	if partitions == 0 {
		partitions = d.inputPartitions(ctx)
	}
	return partitions, replicationFactor
}

// DefaultReplicationFactor is the replication factor of a dead-letter
// topic the worker creates, where the cluster has that many brokers and
// --dlq-replication-factor does not say: a letter survives the loss of
// a broker, and with min.insync.replicas=2 a produce still succeeds.
const DefaultReplicationFactor = 3

// inputPartitions is the input topic's partition count, read once and
// kept: a check runs every --dlq-check-interval, and the count only ever
// grows, which a restart learns. -1 when it cannot be read.
func (d *Writer) inputPartitions(ctx context.Context) int {
	d.mu.Lock()
	n := d.inputParts
	d.mu.Unlock()
	if n > 0 {
		return n
	}
	// A client of its own: the writer's transport answers metadata of the
	// dead-letter topics alone, from its cache.
	client, done, err := d.security.AdminClient(d.brokers, []string{d.topics.Input})
	var md *kafka.MetadataResponse
	if err == nil {
		md, err = client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{d.topics.Input}})
		done()
	}
	if err == nil {
		for _, t := range md.Topics {
			if t.Name == d.topics.Input && t.Error == nil && len(t.Partitions) > 0 {
				n = len(t.Partitions)
			}
		}
	}
	if n == 0 {
		d.log.Warn("could not read the input topic's partitions: dead-letter topics are created with the broker's default",
			"input_topic", d.topics.Input, "err", err, "fix", "set --dlq-partitions")
		return -1
	}
	d.mu.Lock()
	d.inputParts = n
	d.mu.Unlock()
	return n
}

// checkShape records each existing topic's partitions and replicas, and
// where they, or how its records are stamped, fall short of what the
// worker would create it with: letters still go there (fewer partitions
// or replicas is a topic that works, worse; a topic stamped by its
// producers gets letters without payload while its keep is unbounded),
// but the log says each shortfall once and /status shows it until fixed.
func (d *Writer) checkShape(md *kafka.MetadataResponse, rs, prev []TopicRetention, partitions, replicationFactor int) {
	for i := range rs {
		r := &rs[i]
		for _, t := range md.Topics {
			if t.Name != r.Topic || t.Error != nil || len(t.Partitions) == 0 {
				continue
			}
			r.Partitions, r.Replicas = len(t.Partitions), len(t.Partitions[0].Replicas)
			var short []string
			if partitions > 0 && r.Partitions < partitions {
				short = append(short, fmt.Sprintf("%d partitions, fewer than %d", r.Partitions, partitions))
			}
			if replicationFactor > 0 && r.Replicas < replicationFactor {
				short = append(short, fmt.Sprintf("replication factor %d, less than %d", r.Replicas, replicationFactor))
			}
			r.shortShape = strings.Join(short, " and ")
		}
		if r.Policy != "" && r.Stamping.Type != "LogAppendTime" {
			r.shortStamping = fmt.Sprintf("message.timestamp.type %s, not LogAppendTime", r.Stamping.Type)
		}
		if r.Ahead != "" {
			r.shortStamping = strings.Join(slices.DeleteFunc([]string{r.shortStamping, r.Ahead}, func(s string) bool { return s == "" }), "; ")
		}
		r.ShortOf = strings.Join(slices.DeleteFunc([]string{r.shortShape, r.shortStamping}, func(s string) bool { return s == "" }), " and ")
		i := slices.IndexFunc(prev, func(p TopicRetention) bool { return p.Topic == r.Topic })
		var was TopicRetention
		if i >= 0 {
			was = prev[i]
		}
		if r.shortShape != "" && r.shortShape != was.shortShape {
			d.log.Warn("a dead-letter topic has fewer partitions or replicas than the worker would create it with: a burst of bad events queues on fewer partitions, and a broker's loss can lose letters",
				"topic", r.Topic, "has", r.shortShape,
				"fix", fmt.Sprintf("kafka-topics.sh --alter --topic %s --partitions %d; raise replicas with kafka-reassign-partitions.sh; or set --dlq-partitions and --dlq-replication-factor to what the topic has", r.Topic, partitions))
		}
		if r.Ahead != "" && r.Ahead != was.Ahead {
			fix := "see whether the brokers answer ListOffsets, and that this worker's principal may DESCRIBE the topic"
			if r.aheadAt.offset >= 0 {
				fix = fmt.Sprintf("wait until %s + retention.ms, or delete the partition's records up to it: kafka-delete-records.sh with {\"partitions\":[{\"topic\":%q,\"partition\":%d,\"offset\":%d}]} (the letters before it go too)",
					r.aheadAt.at.UTC().Format(time.RFC3339), r.Topic, r.aheadAt.partition, r.aheadAt.offset+1)
			}
			d.log.Warn("a dead-letter topic holds a record stamped past what its settings let a producer stamp now: it keeps its segment and every later letter as long as it says, so letters keep no payload there",
				"topic", r.Topic, "ahead", r.Ahead, "fix", fix)
		} else if r.shortStamping != "" && r.shortStamping != was.shortStamping && r.Ahead == "" {
			d.log.Warn("a dead-letter topic keeps its records by the time their producer stamps: one letter stamped ahead by whoever may produce there keeps its segment, and every later letter, as long as it says",
				"topic", r.Topic, "stamping", r.Stamping.Describe(), "keeps_up_to", keepText(r.Keeps),
				"fix", fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config message.timestamp.type=LogAppendTime", r.Topic))
		}
	}
}

// readSettings reads the topics' retention settings and the brokers'
// retention check into rs. A topic whose settings cannot be read gets a
// problem, and its letters keep no payload until they are read again: the
// last reading may no longer hold (a retention raised while the settings
// could not be read would keep payloads past their events). A topic whose
// keep changed since the last reading is recorded (keepChanged).
func (d *Writer) readSettings(ctx context.Context, md *kafka.MetadataResponse, rs, prev []TopicRetention) {
	check, assumed := retentionCheck(ctx, d.client, md.Brokers)
	if assumed && (len(prev) == 0 || prev[0].Policy == "" || !prev[0].RetentionCheckAssumed) { // said once, not every check
		d.log.Warn("could not read every broker's log.retention.check.interval.ms; assuming at least Kafka's default", "assumed", duration.Format(check))
	}
	if describeErr := d.describe(ctx, md, rs, check, assumed); describeErr != nil {
		d.log.Warn("could not read every dead-letter topic's settings; letters keep no payload until they are read again", "err", describeErr)
	}
	StampedAhead(ctx, d.client, rs, time.Now())
	for i := range rs {
		r := &rs[i]
		if r.Policy == "" && r.Problem == nil {
			// Unread: letters go there without payload, and that is said
			// (/readyz), not left to a warning.
			r.unread = true
			r.Problem = &ProduceError{Err: fmt.Errorf("the settings of dead-letter topic %s could not be read: its letters keep no payload until they are", r.Topic),
				Fix: fmt.Sprintf("grant this worker's principal DESCRIBE_CONFIGS on topic %s, or see whether the brokers answer", r.Topic)}
		}
		if r.Policy != "" {
			// Measured from the last reading, not the last check: a keep
			// raised while the settings could not be read is a growth too.
			d.mu.Lock()
			was, had := d.readKeeps[r.Topic]
			if d.readKeeps == nil {
				d.readKeeps = map[string]time.Duration{}
			}
			d.readKeeps[r.Topic] = r.Keeps
			d.mu.Unlock()
			if had {
				d.keepChanged(r.Topic, was, r.Keeps)
			}
		}
	}
}

// describe reads rs's settings (describeTopics). A topic just created
// (by this check, or by another worker starting at the same moment: the
// metadata md did not have it) is known to the controller before every
// broker has learned it, and a broker that has not answers
// UNKNOWN_TOPIC_OR_PARTITION for a few milliseconds: it is asked again,
// for up to createdSettle, rather than reported unreadable until the next
// check.
func (d *Writer) describe(ctx context.Context, md *kafka.MetadataResponse, rs []TopicRetention, check time.Duration, assumed bool) error {
	// Only a topic that now exists: one that could not be created has its
	// problem already, and would answer so for the whole wait.
	if !slices.ContainsFunc(rs, func(r TopicRetention) bool { return !d.known(md, r.Topic) && r.Problem == nil }) {
		return describeTopics(ctx, d.client, rs, check, assumed)
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(20*time.Millisecond), backoff.WithMaxElapsedTime(createdSettle))
	var err error
	_ = backoff.Retry(func() error {
		err = describeTopics(ctx, d.client, rs, check, assumed)
		if errors.Is(err, kafka.UnknownTopicOrPartition) {
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(b, ctx))
	return err
}

// createdSettle bounds the wait for a topic just created to be known to
// the broker that reads its settings: milliseconds on a healthy cluster.
const createdSettle = 5 * time.Second

// judge decides whether r, read without a problem, may take letters: a
// topic that keeps records forever is refused (unless accepted, and never
// when compacted), and one the broker says this worker may not write to
// gets that problem.
func (d *Writer) judge(ctx context.Context, r *TopicRetention) {
	// A compacted topic refuses letters without a key: accepting it would
	// only wedge their partitions.
	if why := r.unbounded(); why != "" && (!d.topics.AcceptUnbounded || strings.Contains(r.Policy, "compact")) {
		r.refused = true
		r.Problem = &ProduceError{Err: fmt.Errorf("dead-letter topic %s: %s, past every tenant's TTL", r.Topic, why),
			Fix:       fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=delete,retention.ms=%d; or, for retention.ms=-1 only, accept it with --dlq-accept-unbounded (it then gets letters without their payload)", r.Topic, d.topics.creation()[r.Topic].Milliseconds()),
			Permanent: true}
		return
	}
	ok, known, err := d.security.MayWrite(ctx, d.brokers, r.Topic)
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

// failAll gives every topic the same problem.
func (d *Writer) failAll(rs []TopicRetention, err error) ([]TopicRetention, error) {
	for i := range rs {
		rs[i].Problem, rs[i].unread = err, true // nothing read: as unread settings
	}
	return rs, err
}

// known reports whether the metadata has the topic.
func (d *Writer) known(md *kafka.MetadataResponse, topic string) bool {
	for _, t := range md.Topics {
		if t.Name == topic {
			return t.Error == nil
		}
	}
	return false
}

// learnLimit reads the topics' max.message.bytes again, keeping the last
// known one when it cannot.
func (d *Writer) learnLimit(ctx context.Context) int64 {
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
func (d *Writer) keepChanged(topic string, was, now time.Duration) {
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
