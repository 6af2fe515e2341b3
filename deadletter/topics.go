package deadletter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/kafkaconn"
)

// Topics says where dead letters go, and so how long each copy of
// an event's payload can live there.
//
// Kafka deletes by segment: a record is gone once the newest record of its
// segment is older than the topic's retention.ms, at the broker's next
// retention check, and only once every segment before it is. A record
// produced now is therefore unreadable, at the latest, after
//
//	keeps = retention.ms + segment.ms + log.retention.check.interval.ms + ahead
//
// (its segment takes appends for at most segment.ms), where ahead is how
// far ahead of the broker's clock a producer may stamp a record:
// nothing under message.timestamp.type=LogAppendTime, which the worker
// creates its topics with, else message.timestamp.after.max.ms, and
// forever when that is unbounded (Kafka 3.x's default): one letter
// stamped ten years ahead by whoever may produce there would keep its
// segment and every later one ten years. Each dead letter knows
// when its payload must be gone (Letter.ExpiresAt: when the event
// expires in Bigtable, or the bound for events without a valid tenant), and
// goes to the topic with the longest keeps that ends before then, payload
// and all. When no topic's keeps is short enough, the letter goes to Base
// without its payload: the reason, the source offset, the value's size and
// SHA-256, enough to find the event in the input topic while that keeps it.
// So the promise holds by construction, for topics the worker created and
// for topics an operator made, whatever their settings: the settings decide
// only how many letters keep their payload.
type Topics struct {
	// Base gets payload-free letters and undecodable batches, and keeps
	// payloads like a class.
	Base string
	// Retention is the retention.ms Base is created with.
	Retention time.Duration
	// Classes add topics Base+"."+label (label as tenants.yaml writes
	// durations: "1h", "2d"), each created with retention.ms = the class:
	// short-lived letters keep their payload in a short-lived topic.
	Classes []time.Duration
	// AcceptUnbounded takes a topic that keeps records forever
	// (retention.ms -1) instead of refusing it; it then gets payload-free
	// letters only. A compacted topic is refused all the same.
	AcceptUnbounded bool
	// Input is the input topic; Partitions and ReplicationFactor are what
	// a dead-letter topic is created with, 0 taking the input topic's
	// partitions (a burst of bad events of one producer spreads as its
	// events did) and DefaultReplicationFactor capped at the brokers (a
	// letter survives the loss of a broker).
	Input                         string
	Partitions, ReplicationFactor int
}

// Names are the dead-letter topics: Base first, then the classes, shortest
// first.
func (t Topics) Names() []string {
	names := []string{t.Base}
	for _, c := range t.sortedClasses() {
		names = append(names, ClassTopic(t.Base, c))
	}
	return names
}

// ClassTopic is the topic of a retention class.
func ClassTopic(base string, class time.Duration) string {
	return base + "." + duration.Format(class)
}

func (t Topics) sortedClasses() []time.Duration {
	cs := slices.Clone(t.Classes)
	slices.Sort(cs)
	return slices.Compact(cs)
}

// creation is the retention each topic is created with, by name.
func (t Topics) creation() map[string]time.Duration {
	m := map[string]time.Duration{t.Base: t.Retention}
	for _, c := range t.Classes {
		m[ClassTopic(t.Base, c)] = c
	}
	return m
}

// Unread reports whether the last check could not read the topic's
// settings: what the others say is then not known to hold.
func (r TopicRetention) Unread() bool { return r.unread }

// segmentFor is the segment.ms a topic is created with: a twelfth of its
// retention, so that the segment's slack adds a twelfth to how long a record
// can stay, and a topic holds about a dozen segments.
func segmentFor(retention time.Duration) time.Duration {
	return max(retention/12, time.Second)
}

// DefaultRetentionCheck is Kafka's log.retention.check.interval.ms, assumed
// when the broker's cannot be read.
const DefaultRetentionCheck = 5 * time.Minute

// TopicRetention is one dead-letter topic as the last check read it.
type TopicRetention struct {
	Topic   string
	Created bool
	// Retention is retention.ms, -1 for forever; Segment is segment.ms;
	// Policy is cleanup.policy; Stamping how its records are stamped.
	Retention, Segment time.Duration
	Policy             string
	Stamping           kafkaconn.Stamping
	MaxMessageBytes    int64
	// Keeps is the longest a record produced now stays readable, the
	// broker's retention check included; 0 when the topic keeps records
	// forever or its settings could not be read: no payload goes there.
	Keeps time.Duration
	// Writable is "yes", or "unknown" when the broker does not say.
	Writable string
	// RetentionCheck is the broker's log.retention.check.interval.ms, or
	// Kafka's default when it could not be read (RetentionCheckAssumed).
	RetentionCheck        time.Duration
	RetentionCheckAssumed bool
	// Partitions and Replicas are the topic's, as the metadata gave them
	// (0 when it did not); ShortOf says where they fall short of what the
	// worker would create the topic with, "" where they do not.
	Partitions, Replicas int
	ShortOf              string `json:",omitempty"`
	// Ahead, when set, says where the topic holds a record stamped past
	// what its settings let a producer stamp now (StampedAhead): its
	// partition keeps every later record as long as that one says, and
	// Keeps is 0.
	Ahead string `json:",omitempty"`
	// aheadAt is that record's partition, offset and time, for the fix.
	aheadAt struct {
		partition int
		offset    int64
		at        time.Time
	}
	// shortShape and shortStamping are ShortOf's parts, each logged once.
	shortShape, shortStamping string
	// Problem is why the topic takes no dead letters, nil when it does;
	// refused, that it keeps records forever and is not to be written;
	// unread, that its settings could not be read (letters go there
	// without payload). Neither is a problem a letter produced there
	// disproves: only the next check that reads the settings ends it.
	Problem error `json:"-"`
	refused bool
	unread  bool
}

// unbounded reports why a topic keeps records forever, "" when it does not.
func (r TopicRetention) unbounded() string {
	switch {
	case !slices.Contains(strings.Split(r.Policy, ","), "delete"):
		return fmt.Sprintf("cleanup.policy=%s never deletes by age", r.Policy)
	case slices.Contains(strings.Split(r.Policy, ","), "compact"):
		// The cleaner merges old segments, whose newest record then holds
		// the older ones past retention.ms + segment.ms; and a compacted
		// topic refuses records without a key (letters without payload).
		return fmt.Sprintf("cleanup.policy=%s compacts: merged segments keep records past retention.ms, and letters without a key are refused", r.Policy)
	case r.Retention < 0:
		return "retention.ms=-1 keeps records forever"
	}
	return ""
}

// retentionCheck reads log.retention.check.interval.ms from every broker,
// each asked on its own connection (a static setting: only the broker
// itself knows it), and returns the longest; assumed when a broker's could
// not be read, and then never less than Kafka's default.
func retentionCheck(ctx context.Context, client *kafka.Client, brokers []kafka.Broker) (check time.Duration, assumed bool) {
	for _, b := range brokers {
		res, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Addr: kafka.TCP(net.JoinHostPort(b.Host, strconv.Itoa(b.Port))),
			Resources: []kafka.DescribeConfigRequestResource{{ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(b.ID),
				ConfigNames: []string{"log.retention.check.interval.ms"}}}})
		read := false
		if err == nil && len(res.Resources) == 1 && res.Resources[0].Error == nil {
			for _, e := range res.Resources[0].ConfigEntries {
				if ms, perr := strconv.ParseInt(e.ConfigValue, 10, 64); perr == nil && e.ConfigName == "log.retention.check.interval.ms" && ms > 0 {
					check, read = max(check, time.Duration(ms)*time.Millisecond), true
				}
			}
		}
		assumed = assumed || !read
	}
	if assumed || check == 0 {
		return max(check, DefaultRetentionCheck), true
	}
	return check, false
}

// describeTopics reads each topic's retention settings in one request and
// fills its keep, with the brokers' retention check.
func describeTopics(ctx context.Context, client *kafka.Client, rs []TopicRetention, check time.Duration, checkAssumed bool) (err error) {
	req := &kafka.DescribeConfigsRequest{}
	for _, r := range rs {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: r.Topic,
			ConfigNames: append([]string{"retention.ms", "segment.ms", "cleanup.policy", "max.message.bytes"}, kafkaconn.TimestampConfigs...)})
	}
	res, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return fmt.Errorf("describe configs: %w", err)
	}
	var errs []error
	for _, res := range res.Resources {
		i := slices.IndexFunc(rs, func(r TopicRetention) bool { return r.Topic == res.ResourceName })
		if i < 0 {
			continue
		}
		if res.Error != nil {
			errs = append(errs, fmt.Errorf("configs of %s: %w", res.ResourceName, res.Error))
			continue
		}
		r := &rs[i]
		r.Retention, r.Segment, r.Policy = 0, 0, ""
		stamping := map[string]string{}
		for _, e := range res.ConfigEntries {
			if slices.Contains(kafkaconn.TimestampConfigs, e.ConfigName) {
				stamping[e.ConfigName] = e.ConfigValue
			}
			n, perr := strconv.ParseInt(e.ConfigValue, 10, 64)
			switch {
			case e.ConfigName == "cleanup.policy":
				r.Policy = strings.ReplaceAll(e.ConfigValue, " ", "")
			case perr != nil:
			case e.ConfigName == "retention.ms":
				r.Retention, _ = kafkaconn.Millis(e.ConfigValue) // -1: forever, past a Duration too
			case e.ConfigName == "segment.ms":
				r.Segment, _ = kafkaconn.Millis(e.ConfigValue)
				r.Segment = max(r.Segment, 0) // unreadable: no keep
			case e.ConfigName == "max.message.bytes":
				r.MaxMessageBytes = n
			}
		}
		var serr error
		if r.Stamping, serr = kafkaconn.StampingOf(r.Topic, stamping); serr != nil {
			r.Policy = "" // unread: no keep is known
			errs = append(errs, serr)
		}
		if r.Policy == "" || r.Segment <= 0 || r.Retention == 0 {
			errs = append(errs, fmt.Errorf("configs of %s: retention.ms, segment.ms or cleanup.policy not in the answer", r.Topic))
		}
	}
	for i := range rs {
		r := &rs[i]
		r.RetentionCheck, r.RetentionCheckAssumed = check, checkAssumed
		r.Keeps = r.keeps()
	}
	return errors.Join(errs...)
}

// keeps is the longest a record produced now stays readable (see Topics),
// 0 when that is forever or the settings are unread.
func (r TopicRetention) keeps() time.Duration {
	ahead := r.Stamping.SegmentAhead()
	if r.Policy == "" || r.Segment <= 0 || r.Retention <= 0 || r.unbounded() != "" || ahead < 0 || r.Ahead != "" {
		return 0
	}
	const most = math.MaxInt64 / 8 // four of them still fit a Duration
	if r.Retention >= most || r.Segment >= most || ahead >= most || r.RetentionCheck >= most {
		return 0
	}
	return r.Retention + r.Segment + r.RetentionCheck + ahead
}

// clockMargin is how far the placing worker's clock may lie behind the
// brokers' with no letter outliving its event: a topic that stamps by the
// broker's clock (LogAppendTime, as the worker creates its topics) counts
// a letter's keep from its own append time, not from the worker's
// placement. NTP keeps hosts within milliseconds: ten seconds is a host
// that lost it long ago, and costs a letter its payload only when its
// event expires within its topic's keep and ten seconds. A clock ahead
// errs on the safe side.
const clockMargin = 10 * time.Second

// place picks the topic a letter goes to: of those whose records are gone
// by expires (with clockMargin to spare), the one that keeps them longest, payload and all; else Base,
// without the payload. rs is in Names order. A topic refused for keeping
// records forever takes nothing (Base is named even then: the caller's
// writes wait); one with another problem (a write denied, a leader
// missing) is chosen all the same, and the letter waits for it, payload
// and all: the problem is time's or an operator's to fix, and a letter
// that lost its payload cannot get it back.
func place(rs []TopicRetention, now, expires time.Time) (topic string, payload bool) {
	best := -1
	for i, r := range rs {
		if r.refused || r.Keeps <= 0 || now.Add(r.Keeps+clockMargin).After(expires) {
			continue
		}
		if best < 0 || r.Keeps > rs[best].Keeps {
			best = i
		}
	}
	if best < 0 {
		return rs[0].Topic, false
	}
	return rs[best].Topic, true
}

// ReadTopics reads topics' retention settings (and the broker's retention
// check interval) for a retention statement: the same reading the
// dead-letter writer makes. A topic whose settings cannot be read has its
// Problem set.
func ReadTopics(ctx context.Context, brokers []string, security kafkaconn.Security, topics []string) ([]TopicRetention, error) {
	client, done, err := security.AdminClient(brokers, topics)
	if err != nil {
		return nil, err
	}
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	rs := make([]TopicRetention, len(topics))
	var exist []TopicRetention
	for i, t := range topics {
		rs[i].Topic = t
		found := false
		for _, mt := range md.Topics {
			found = found || (mt.Name == t && mt.Error == nil)
		}
		if !found {
			rs[i].Problem = fmt.Errorf("topic %s %w", t, ErrTopicMissing)
			continue
		}
		exist = append(exist, rs[i])
	}
	var describeErr error
	if len(exist) > 0 {
		check, assumed := retentionCheck(ctx, client, md.Brokers)
		describeErr = describeTopics(ctx, client, exist, check, assumed)
		StampedAhead(ctx, client, exist, time.Now())
	}
	for _, e := range exist {
		i := slices.IndexFunc(rs, func(r TopicRetention) bool { return r.Topic == e.Topic })
		rs[i] = e
		if e.Policy == "" {
			rs[i].Problem = fmt.Errorf("settings of %s could not be read: %v", e.Topic, describeErr)
		}
	}
	return rs, describeErr
}

// ErrTopicMissing is ReadTopics' problem for a topic that does not exist.
var ErrTopicMissing = errors.New("does not exist")

// TopicsOn lists the dead-letter topics the broker has: base and
// every topic named base.<something>, the classes the flags name now and
// those they named before (their letters are there until their retention
// takes them), sorted, base first when it exists.
func TopicsOn(ctx context.Context, brokers []string, security kafkaconn.Security, base string) ([]string, error) {
	client, done, err := security.AdminClient(brokers, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var out []string
	for _, t := range md.Topics {
		if t.Error == nil && (t.Name == base || strings.HasPrefix(t.Name, base+".")) {
			out = append(out, t.Name)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case a == base:
			return -1
		case b == base:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out, nil
}
