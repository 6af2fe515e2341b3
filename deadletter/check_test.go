package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/describeconfigs"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A topic the worker has just created is read at once: its settings, in
// the same check. The controller knows a new topic before the brokers
// that answer DescribeConfigs do; a check that asked once said the topic
// could not be read, /readyz answered 503 and the letters kept no payload
// until the next check, 30 s later (seen in rolling restarts under load).
// The broker's lag is injected: its first two answers for the topics say
// UNKNOWN_TOPIC_OR_PARTITION.
func TestCheckReadsTopicsJustCreated(t *testing.T) {
	testenv.BrokerVersionMatters(t, "DescribeConfigs of a topic just created")
	brokers := testenv.Kafka(t)
	topics := Topics{Base: testenv.Name("made"), Retention: time.Hour, Classes: []time.Duration{12 * time.Second, 2 * time.Hour}, Partitions: 2}
	d, err := NewWriter(brokers, topics, kafkaconn.Security{}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lag := &describeFault{RoundTripper: d.client.Transport, left: 2, code: kafka.UnknownTopicOrPartition}
	d.client.Transport = lag
	rs, err := d.Check(t.Context())
	if err != nil {
		t.Fatalf("the first check of topics it created: %v", err)
	}
	for _, r := range rs {
		if !r.Created || r.Keeps <= 0 || r.Policy != "delete" {
			t.Errorf("%s: created %t, keeps %s, cleanup.policy %q; want created and read", r.Topic, r.Created, r.Keeps, r.Policy)
		}
	}
	if lag.left != 0 {
		t.Errorf("the broker's lag was not met: %d answers left", lag.left)
	}
}

// Two workers start at once on new topics: one creates them, the other
// finds them created (TOPIC_ALREADY_EXISTS, or in its metadata). Both read
// their settings in their first check. On the real broker, without the
// injected lag: without any wait, one run in five failed here.
func TestCheckReadsTopicsJustCreatedByAnother(t *testing.T) {
	testenv.BrokerVersionMatters(t, "DescribeConfigs of a topic another client just created")
	brokers := testenv.Kafka(t)
	for range 10 {
		topics := Topics{Base: testenv.Name("made"), Retention: time.Hour, Classes: []time.Duration{12 * time.Second, 2 * time.Hour}, Partitions: 2}
		var (
			wg      sync.WaitGroup
			created [2][]bool
		)
		for w := range 2 {
			d, err := NewWriter(brokers, topics, kafkaconn.Security{}, nil, quiet)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				defer d.Close()
				rs, err := d.Check(t.Context())
				if err != nil {
					t.Errorf("the first check of topics just created: %v", err)
				}
				for _, r := range rs {
					created[w] = append(created[w], r.Created)
					if r.Keeps <= 0 || r.Policy != "delete" {
						t.Errorf("%s: keeps %s, cleanup.policy %q; want it read", r.Topic, r.Keeps, r.Policy)
					}
				}
			})
		}
		wg.Wait()
		for i := range created[0] {
			if created[0][i] == created[1][i] {
				t.Errorf("topic %d created by both workers or neither: %v", i, created)
			}
		}
	}
}

// describeFault answers the next left DescribeConfigs requests for topics
// with code: UNKNOWN_TOPIC_OR_PARTITION as a broker that has not learned
// a new topic yet does, TOPIC_AUTHORIZATION_FAILED as one whose ACLs
// deny it.
type describeFault struct {
	kafka.RoundTripper
	mu   sync.Mutex
	left int
	code kafka.Error
}

func (u *describeFault) fail(n int) {
	u.mu.Lock()
	u.left = n
	u.mu.Unlock()
}

func (u *describeFault) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	if q, ok := req.(*describeconfigs.Request); ok && len(q.Resources) > 0 && q.Resources[0].ResourceType == int8(kafka.ResourceTypeTopic) {
		u.mu.Lock()
		failing := u.left > 0
		if failing {
			u.left--
		}
		u.mu.Unlock()
		if failing {
			res := &describeconfigs.Response{}
			for _, r := range q.Resources {
				res.Resources = append(res.Resources, describeconfigs.ResponseResource{ResourceType: r.ResourceType, ResourceName: r.ResourceName,
					ErrorCode: int16(u.code)})
			}
			return res, nil
		}
	}
	return u.RoundTripper.RoundTrip(ctx, addr, req)
}

// A keep raised while the settings could not be read is a growth all the
// same: it is measured from the last reading, not from the last check
// (whose unread topic says nothing). Letters placed for 37 minutes now
// stay 30 days: the worker says so, and /readyz with it.
func TestKeepGrownWhileUnreadIsReported(t *testing.T) {
	testenv.BrokerVersionMatters(t, "a topic's retention settings as the broker reports them")
	brokers := testenv.Kafka(t)
	topic := testenv.Name("dead")
	testenv.CreateTopicWith(t, brokers, topic, 1, testenv.DeadLetterConfigs)
	d, err := NewWriter(brokers, Topics{Base: topic, Retention: time.Hour}, kafkaconn.Security{}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fault := &describeFault{RoundTripper: d.client.Transport, code: kafka.TopicAuthorizationFailed}
	d.client.Transport = fault
	if _, err := d.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d.Topics()[0].Unread() {
		t.Error("settings read: said unread")
	}
	fault.fail(1)
	if _, err := d.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("a check that could not read the settings: %v", err)
	}
	// What the retention shortfall counts: an unread topic, whatever its
	// last reading said.
	if !d.Topics()[0].Unread() {
		t.Error("a check that could not read the settings: not said unread")
	}
	res, err := d.client.AlterConfigs(t.Context(), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, Configs: []kafka.AlterConfigRequestConfig{
			{Name: "retention.ms", Value: "2592000000"}, {Name: "segment.ms", Value: "120000"}, {Name: "cleanup.policy", Value: "delete"},
			{Name: "message.timestamp.type", Value: "LogAppendTime"}}}}})
	if err == nil {
		err = errors.Join(slices.Collect(maps.Values(res.Errors))...)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The controller has the new settings when AlterConfigs returns; the
	// broker that answers DescribeConfigs applies them a moment later, and
	// a check in between read the old ones.
	waitSettings(t, brokers, topic, func(r TopicRetention) bool { return r.Retention == 30*24*time.Hour })
	if _, err := d.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := d.Problem(); err == nil || !strings.Contains(err.Error(), "keeps records up to 30d") {
		t.Errorf("a keep grown from 37m to 30d while unread: problem %v", err)
	}
}

// A check cut short by the worker stopping says nothing about the topics:
// it neither reports a topic that keeps records forever (it read nothing,
// and an unread keep is not "forever") nor replaces what the last check
// found. Seen in a rolling restart: every stopping worker logged, at
// ERROR, that its dead-letter topic now kept records forever.
func TestCheckCutShortChangesNothing(t *testing.T) {
	var logs bytes.Buffer
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	d := &Writer{topics: Topics{Base: "dlq"}, log: slog.New(slog.NewTextHandler(&logs, nil)), now: time.Now,
		client: &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Transport: transport, Timeout: time.Second}}
	read := TopicRetention{Topic: "dlq", Policy: "delete", Retention: 24 * time.Hour, Segment: 2 * time.Hour, Keeps: 26 * time.Hour, Writable: "yes"}
	d.state = []TopicRetention{read}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	// The metadata answered, then the worker stopped: the settings' read
	// fails with the context.
	rs := []TopicRetention{{Topic: "dlq"}}
	d.readSettings(ctx, &kafka.MetadataResponse{}, rs, d.Topics())
	if strings.Contains(logs.String(), "keeps records longer") {
		t.Errorf("a settings read cut short reported a keep grown:\n%s", logs.String())
	}
	if err := d.Problem(); err != nil {
		t.Errorf("a settings read cut short left a problem: %v", err)
	}

	if _, err := d.Check(ctx); err == nil {
		t.Error("a check cut short returned no error")
	}
	if got := d.Topics(); len(got) != 1 || got[0] != read {
		t.Errorf("a check cut short replaced what the last one found: %+v, want %+v", got, read)
	}
	if err := d.Problem(); err != nil {
		t.Errorf("a check cut short left a problem: %v", err)
	}
}

// A check that could not even read the metadata read no settings: letters
// go without payload, and a letter produced meanwhile does not make the
// topics ready (/readyz) before a check reads them.
func TestMetadataFailureStaysAProblemUntilRead(t *testing.T) {
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	d := &Writer{topics: Topics{Base: "dlq"}, log: quiet, now: time.Now,
		client: &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Transport: transport, Timeout: time.Second}}
	if _, err := d.Check(t.Context()); err == nil {
		t.Fatal("a check without a broker found no problem")
	}
	d.produced(nil, "dlq")
	if err := d.Problem(); err == nil {
		t.Error("a letter produced without payload cleared a check that read nothing")
	}
}

// waitSettings waits until the broker that answers DescribeConfigs reads
// topic's settings as ok says: the controller has them when AlterConfigs
// returns, the brokers a moment later.
func waitSettings(t *testing.T, brokers []string, topic string, ok func(TopicRetention) bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() (bool, string) {
		rs, err := ReadTopics(t.Context(), brokers, kafkaconn.Security{}, []string{topic})
		if err != nil || len(rs) != 1 {
			return false, fmt.Sprintf("read %s's settings: %v", topic, err)
		}
		return ok(rs[0]), fmt.Sprintf("the broker reads %s's settings as %+v", topic, rs[0])
	})
}
