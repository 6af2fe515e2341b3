package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/tick"
)

// RecordTimes is how far the input topic lets producers stamp a record
// into the future. A record's timestamp is the time its TTL counts from
// when the event carries none (or one further ahead than --max-clock-skew,
// clamped to it): a producer that may stamp ten years ahead buys its data
// ten years. Kafka bounds it per topic with message.timestamp.after.max.ms
// (3.6 and later; before, message.timestamp.difference.max.ms bounds both
// ways), and only under CreateTime. Under LogAppendTime the broker stamps
// each batch with its own clock, and the worker reads that time as each
// record's (as Kafka's own consumer does): no producer stamps the future,
// whatever after.max.ms says.
type RecordTimes struct {
	Topic string `json:"topic"`
	// Type is message.timestamp.type: CreateTime or LogAppendTime.
	Type string `json:"type"`
	// AheadMax is how far ahead of the broker's clock a timestamp may be;
	// -1 when nothing bounds it.
	AheadMax time.Duration `json:"-"`
	// Setting is the config that decides it, as Kafka names it.
	Setting string `json:"setting"`
	// Bounded says whether producers are held to the skew the worker
	// allows; Summary says it in words.
	Bounded bool   `json:"bounded"`
	Summary string `json:"summary"`
	// Unread says why the settings could not be read at the last check
	// (the others are the last reading, if any): a watch's only.
	Unread string `json:"unread,omitempty"`
}

// Millis reads a setting in milliseconds: Kafka's Long.MAX_VALUE, or
// anything past what a time.Duration holds, is -1 (no bound).
func Millis(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
		return -1, nil
	}
	return time.Duration(n) * time.Millisecond, nil
}

// TimestampConfigs are the topic settings that say how its records are
// stamped (Stamping).
var TimestampConfigs = []string{"message.timestamp.type", "message.timestamp.after.max.ms", "message.timestamp.difference.max.ms"}

// Stamping is how a topic's records are stamped, as its settings say.
type Stamping struct {
	// Type is message.timestamp.type: CreateTime or LogAppendTime.
	Type string
	// AheadMax is how far ahead of the broker's clock a producer may
	// stamp a record; -1 when nothing bounds it. Setting is the config
	// that decides it, as Kafka names it.
	AheadMax time.Duration
	Setting  string
}

// StampingOf reads a topic's TimestampConfigs, by name. after.max.ms (3.6
// and later) bounds the future alone; when it is unbounded,
// difference.max.ms (deprecated, still enforced) may bound both ways.
func StampingOf(topic string, configs map[string]string) (Stamping, error) {
	st := Stamping{Type: configs["message.timestamp.type"], AheadMax: -1, Setting: "message.timestamp.after.max.ms"}
	if st.Type == "" {
		return st, fmt.Errorf("timestamp settings of %s: message.timestamp.type not in the answer", topic)
	}
	var err error
	if after := configs[st.Setting]; after != "" {
		if st.AheadMax, err = Millis(after); err != nil {
			return st, fmt.Errorf("timestamp settings of %s: %s: %w", topic, st.Setting, err)
		}
	}
	if difference := configs["message.timestamp.difference.max.ms"]; st.AheadMax < 0 && difference != "" {
		d, err := Millis(difference)
		if err != nil {
			return st, fmt.Errorf("timestamp settings of %s: message.timestamp.difference.max.ms: %w", topic, err)
		}
		if d >= 0 {
			st.AheadMax, st.Setting = d, "message.timestamp.difference.max.ms"
		}
	}
	return st, nil
}

// SegmentAhead is how much longer than retention.ms a record may keep its
// segment, and every later one, in the broker's eyes: Kafka deletes a
// segment only once its newest timestamp is older than retention.ms, and
// only from the log's front. Under LogAppendTime the broker stamps each
// batch with its own clock: nothing. Under CreateTime a producer's stamp
// counts, as far ahead as AheadMax lets it; -1 (forever) when nothing
// bounds it, which is Kafka 3.x's default. (A record without a timestamp
// holds its segment by the segment file's time: nothing ahead.)
func (st Stamping) SegmentAhead() time.Duration {
	if st.Type == "LogAppendTime" {
		return 0
	}
	return st.AheadMax
}

// Describe says in words what SegmentAhead is and why, for a statement.
func (st Stamping) Describe() string {
	switch a := st.SegmentAhead(); {
	case st.Type == "LogAppendTime":
		return "message.timestamp.type=LogAppendTime (the broker stamps each batch)"
	case a < 0:
		return fmt.Sprintf("message.timestamp.type=%s with %s unbounded: a record stamped ahead keeps its segment, and every later one, as long as it says "+
			"(bound it: message.timestamp.after.max.ms, or message.timestamp.type=LogAppendTime)", st.Type, st.Setting)
	default:
		return fmt.Sprintf("message.timestamp.type=%s: records stamped up to %s ahead (%s)", st.Type, duration.Format(a), st.Setting)
	}
}

// readRecordTimes reads the topic's timestamp settings (its own, or the
// broker's defaults it inherits).
func readRecordTimes(ctx context.Context, client *kafka.Client, topic string, skew time.Duration) (RecordTimes, error) {
	rt := RecordTimes{Topic: topic, AheadMax: -1}
	res, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: TimestampConfigs,
	}}})
	if err == nil && len(res.Resources) == 1 {
		err = res.Resources[0].Error
	}
	if err != nil {
		return rt, fmt.Errorf("timestamp settings of %s: %w", topic, err)
	}
	configs := map[string]string{}
	for _, e := range res.Resources[0].ConfigEntries {
		configs[e.ConfigName] = e.ConfigValue
	}
	st, err := StampingOf(topic, configs)
	if err != nil {
		return rt, err
	}
	rt.Type, rt.AheadMax, rt.Setting = st.Type, st.AheadMax, st.Setting
	switch {
	case rt.Type == "LogAppendTime":
		// Kafka applies the bound settings to CreateTime alone; under
		// LogAppendTime the broker's clock is the record's time.
		rt.Bounded, rt.AheadMax, rt.Setting = true, 0, "message.timestamp.type"
		rt.Summary = "the broker stamps each record with its own clock (message.timestamp.type=LogAppendTime): no producer can stamp one ahead"
	case rt.AheadMax < 0:
		rt.Summary = fmt.Sprintf("producers may stamp records any time ahead (%s unbounded): an event without its own time, or clamped to the record's, lives as long past now as its producer says", rt.Setting)
	case rt.AheadMax <= skew:
		rt.Bounded = true
		rt.Summary = fmt.Sprintf("producers may stamp records at most %s ahead (%s), within --max-clock-skew %s", duration.Format(rt.AheadMax), rt.Setting, duration.Format(skew))
	default:
		rt.Summary = fmt.Sprintf("producers may stamp records %s ahead (%s), past --max-clock-skew %s: such an event lives that much longer than its TTL", duration.Format(rt.AheadMax), rt.Setting, duration.Format(skew))
	}
	return rt, nil
}

// RecordTimeWatch reads the input topic's timestamp settings at start and
// every interval: the log says when producers can stamp the future, /status
// shows it, and under strict it is a Problem, for /readyz and for the
// writes, which wait while there is one.
type RecordTimeWatch struct {
	client    *kafka.Client
	transport *kafka.Transport
	topic     string
	skew      time.Duration
	strict    bool
	log       *slog.Logger

	mu       sync.Mutex
	last     RecordTimes // the last reading, kept while the settings cannot be read
	err      error       // why the last check failed, nil when it read them
	read     time.Time   // when the settings were last read
	interval time.Duration
	now      func() time.Time
}

// StaleAfter is how many check intervals the settings may go unread before,
// under strict, that is a Problem too: one failed read (a broker
// restarting, the controller moving) does not stop the writes; settings
// that stay unreadable do, since they can no longer show that producers
// are bounded. The erasure ledger's rule (erasure.StaleAfter).
const StaleAfter = 3

// NewRecordTimeWatch watches topic's settings against skew.
func NewRecordTimeWatch(brokers []string, topic string, security Security, skew time.Duration, strict bool, log *slog.Logger) (*RecordTimeWatch, error) {
	transport, err := security.Transport()
	if err != nil {
		return nil, err
	}
	transport.MetadataTopics = []string{topic}
	return &RecordTimeWatch{client: &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport, Timeout: 10 * time.Second},
		transport: transport, topic: topic, skew: skew, strict: strict, log: log, now: time.Now}, nil
}

// Check reads the settings once and logs what changed. When they cannot be
// read, the last reading stands (a relaxed topic stays a Problem).
func (w *RecordTimeWatch) Check(ctx context.Context) (RecordTimes, error) {
	rt, err := readRecordTimes(ctx, w.client, w.topic, w.skew)
	w.mu.Lock()
	before, beforeErr := w.last, w.err
	w.err = err
	if err == nil {
		w.last, w.read = rt, w.now()
	}
	w.mu.Unlock()
	held := ""
	if w.strict {
		held = "writes wait (--strict-retention) until the topic bounds them again"
	}
	switch {
	case err != nil:
		if beforeErr == nil || beforeErr.Error() != err.Error() {
			w.log.Warn("could not read the input topic's timestamp settings", "err", err, "strict_retention", w.strict,
				"then", fmt.Sprintf("under --strict-retention, writes wait once they go unread for %d checks", StaleAfter))
		}
	case rt.Summary != before.Summary && rt.Bounded:
		w.log.Info("record timestamps", "topic", w.topic, "bounded", true, "summary", rt.Summary)
	case rt.Summary != before.Summary:
		w.log.Warn("record timestamps", "topic", w.topic, "bounded", false, "summary", rt.Summary, "held", held,
			"fix", fmt.Sprintf("kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config message.timestamp.after.max.ms=%d", w.topic, w.skew.Milliseconds()))
	}
	return rt, err
}

// Run checks every interval until ctx ends.
func (w *RecordTimeWatch) Run(ctx context.Context, interval time.Duration) {
	w.mu.Lock()
	w.interval = interval
	w.mu.Unlock()
	tick.Every(ctx, interval, func(ctx context.Context) { _, _ = w.Check(ctx) })
}

// Status is what the last check found: the last reading, and why the
// last check could not read the settings if it could not.
func (w *RecordTimeWatch) Status() RecordTimes {
	w.mu.Lock()
	defer w.mu.Unlock()
	rt := w.last
	rt.Topic = w.topic
	switch {
	case w.err != nil:
		rt.Unread = w.err.Error()
	case w.last.Type == "":
		rt.Unread = "not read yet"
	}
	return rt
}

// Vouches reports whether the settings show producers held to the skew,
// as read within StaleAfter intervals: settings that stay unreadable can
// no longer show it, and the retention shortfall counts them.
func (w *RecordTimeWatch) Vouches() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last.Type != "" && w.last.Bounded && !w.staleLocked()
}

// staleLocked reports whether the settings have gone unread for more than
// StaleAfter intervals.
func (w *RecordTimeWatch) staleLocked() bool {
	return w.interval > 0 && w.now().Sub(w.read) > StaleAfter*w.interval
}

// Problem's errors under strict: the topic lets producers stamp beyond the
// skew, or its settings have gone unread for StaleAfter intervals.
var (
	ErrUnboundedTimestamps = errors.New("the input topic lets producers stamp records beyond --max-clock-skew")
	ErrTimestampsUnread    = errors.New("the input topic's timestamp settings cannot be read")
)

// Problem is, under strict, why the retention promise does not hold for
// record timestamps, nil otherwise: the last reading lets producers stamp
// beyond the skew, or the settings have not been read for StaleAfter
// intervals (a single failed read keeps the last reading). The worker's
// writes wait while there is one, and /readyz fails.
func (w *RecordTimeWatch) Problem() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.strict {
		return nil
	}
	if age := w.now().Sub(w.read); !w.read.IsZero() && w.staleLocked() {
		return fmt.Errorf("%w: not read for %s (%v); writes wait until they are (--strict-retention)", ErrTimestampsUnread, age.Round(time.Second), w.err)
	}
	if w.last.Type == "" || w.last.Bounded {
		return nil
	}
	return fmt.Errorf("%w: %s; writes wait until it bounds them (--strict-retention)", ErrUnboundedTimestamps, w.last.Summary)
}

// Close closes the watch's connections.
func (w *RecordTimeWatch) Close() { w.transport.CloseIdleConnections() }

// ReadRecordTimes reads the input topic's timestamp settings once.
func ReadRecordTimes(ctx context.Context, brokers []string, security Security, topic string, skew time.Duration) (RecordTimes, error) {
	client, done, err := security.AdminClient(brokers, []string{topic})
	if err != nil {
		return RecordTimes{}, err
	}
	defer done()
	return readRecordTimes(ctx, client, topic, skew)
}
