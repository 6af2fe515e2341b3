package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/duration"
)

// DeadLetterTopics says where dead letters go, and so how long each copy of
// an event's payload can live there.
//
// Kafka deletes by segment: a record is gone once the newest record of its
// segment is older than the topic's retention.ms, at the broker's next
// retention check. A record produced now with its own time as timestamp is
// therefore unreadable, at the latest, after
//
//	keeps = retention.ms + segment.ms + log.retention.check.interval.ms
//
// (its segment takes appends for at most segment.ms). Each dead letter knows
// when its payload must be gone (DeadLetter.ExpiresAt: when the event
// expires in Bigtable, or the bound for events without a valid tenant), and
// goes to the topic with the longest keeps that ends before then, payload
// and all. When no topic's keeps is short enough, the letter goes to Base
// without its payload: the reason, the source offset, the value's size and
// SHA-256, enough to find the event in the input topic while that keeps it.
// So the promise holds by construction, for topics the worker created and
// for topics an operator made, whatever their settings: the settings decide
// only how many letters keep their payload.
type DeadLetterTopics struct {
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
}

// Names are the dead-letter topics: Base first, then the classes, shortest
// first.
func (t DeadLetterTopics) Names() []string {
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

func (t DeadLetterTopics) sortedClasses() []time.Duration {
	cs := slices.Clone(t.Classes)
	slices.Sort(cs)
	return slices.Compact(cs)
}

// creation is the retention each topic is created with, by name.
func (t DeadLetterTopics) creation() map[string]time.Duration {
	m := map[string]time.Duration{t.Base: t.Retention}
	for _, c := range t.Classes {
		m[ClassTopic(t.Base, c)] = c
	}
	return m
}

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
	// Policy is cleanup.policy.
	Retention, Segment time.Duration
	Policy             string
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
	// Problem is why the topic takes no dead letters, nil when it does;
	// refused, that it keeps records forever and is not to be written.
	Problem error `json:"-"`
	refused bool
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

// describeTopics reads each topic's retention settings and the broker's
// retention check interval in one request, filling keeps.
func describeTopics(ctx context.Context, client *kafka.Client, rs []TopicRetention, brokerID int) (check time.Duration, err error) {
	req := &kafka.DescribeConfigsRequest{}
	for _, r := range rs {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: r.Topic,
			ConfigNames: []string{"retention.ms", "segment.ms", "cleanup.policy", "max.message.bytes"}})
	}
	req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(brokerID),
		ConfigNames: []string{"log.retention.check.interval.ms"}})
	res, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("describe configs: %w", err)
	}
	check, checkKnown := DefaultRetentionCheck, false
	var errs []error
	for _, res := range res.Resources {
		if res.ResourceType == int8(kafka.ResourceTypeBroker) {
			for _, e := range res.ConfigEntries {
				if ms, perr := strconv.ParseInt(e.ConfigValue, 10, 64); perr == nil && e.ConfigName == "log.retention.check.interval.ms" && ms > 0 {
					check, checkKnown = time.Duration(ms)*time.Millisecond, true
				}
			}
			continue
		}
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
		for _, e := range res.ConfigEntries {
			n, perr := strconv.ParseInt(e.ConfigValue, 10, 64)
			switch {
			case e.ConfigName == "cleanup.policy":
				r.Policy = strings.ReplaceAll(e.ConfigValue, " ", "")
			case perr != nil:
			case e.ConfigName == "retention.ms":
				r.Retention, _ = msDuration(e.ConfigValue) // -1: forever, past a Duration too
			case e.ConfigName == "segment.ms":
				r.Segment, _ = msDuration(e.ConfigValue)
				r.Segment = max(r.Segment, 0) // unreadable: no keep
			case e.ConfigName == "max.message.bytes":
				r.MaxMessageBytes = n
			}
		}
		if r.Policy == "" || r.Segment <= 0 || r.Retention == 0 {
			errs = append(errs, fmt.Errorf("configs of %s: retention.ms, segment.ms or cleanup.policy not in the answer", r.Topic))
		}
	}
	if !checkKnown {
		err = fmt.Errorf("the broker's log.retention.check.interval.ms could not be read; assuming Kafka's default, %s", DefaultRetentionCheck)
	}
	for i := range rs {
		r := &rs[i]
		r.Keeps, r.RetentionCheck, r.RetentionCheckAssumed = 0, check, !checkKnown
		if r.Policy != "" && r.Segment > 0 && r.Retention > 0 && r.unbounded() == "" && r.Retention < math.MaxInt64/4 && r.Segment < math.MaxInt64/4 {
			r.Keeps = r.Retention + r.Segment + check
		}
	}
	return check, errors.Join(append(errs, err)...)
}

// place picks the topic a letter goes to: of those whose records are gone
// by expires, the one that keeps them longest, payload and all; else Base,
// without the payload. rs is in Names order. A topic refused for keeping
// records forever takes nothing (Base is named even then: the caller's
// writes wait); one with another problem (a write denied, a leader
// missing) is chosen all the same, and the letter waits for it, payload
// and all: the problem is time's or an operator's to fix, and a letter
// that lost its payload cannot get it back.
func place(rs []TopicRetention, now, expires time.Time) (topic string, payload bool) {
	best := -1
	for i, r := range rs {
		if r.refused || r.Keeps <= 0 || now.Add(r.Keeps).After(expires) {
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
func ReadTopics(ctx context.Context, brokers []string, security Security, topics []string) ([]TopicRetention, error) {
	client, done, err := adminClient(brokers, security, topics)
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
			rs[i].Problem = fmt.Errorf("topic %s does not exist", t)
			continue
		}
		exist = append(exist, rs[i])
	}
	var describeErr error
	if len(exist) > 0 {
		_, describeErr = describeTopics(ctx, client, exist, md.Controller.ID)
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

// adminClient is a client for one-off reads of topic settings.
func adminClient(brokers []string, security Security, topics []string) (*kafka.Client, func(), error) {
	transport, err := security.Transport()
	if err != nil {
		return nil, nil, err
	}
	transport.MetadataTopics = topics
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport, Timeout: 10 * time.Second}, transport.CloseIdleConnections, nil
}
