package deadletter

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/describeconfigs"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/internal/testenv"
)

// A topic the worker has just created is read at once: its settings, in
// the same check. The controller knows a new topic before the brokers
// that answer DescribeConfigs do; a check that asked once said the topic
// could not be read, /readyz answered 503 and the letters kept no payload
// until the next check, 30 s later (seen in rolling restarts under load).
// The broker's lag is injected: its first two answers for the topics say
// UNKNOWN_TOPIC_OR_PARTITION.
func TestCheckReadsTopicsJustCreated(t *testing.T) {
	brokers := testenv.Kafka(t)
	topics := Topics{Base: testenv.Name("made"), Retention: time.Hour, Classes: []time.Duration{12 * time.Second, 2 * time.Hour}, Partitions: 2}
	d, err := NewWriter(brokers, topics, kafkaconn.Security{}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lag := &unknownAtFirst{RoundTripper: d.client.Transport, left: 2}
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

// unknownAtFirst answers the first left DescribeConfigs requests for
// topics as a broker that has not learned them yet does.
type unknownAtFirst struct {
	kafka.RoundTripper
	mu   sync.Mutex
	left int
}

func (u *unknownAtFirst) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	if q, ok := req.(*describeconfigs.Request); ok && len(q.Resources) > 0 && q.Resources[0].ResourceType == int8(kafka.ResourceTypeTopic) {
		u.mu.Lock()
		lagging := u.left > 0
		if lagging {
			u.left--
		}
		u.mu.Unlock()
		if lagging {
			res := &describeconfigs.Response{}
			for _, r := range q.Resources {
				res.Resources = append(res.Resources, describeconfigs.ResponseResource{ResourceType: r.ResourceType, ResourceName: r.ResourceName,
					ErrorCode: int16(kafka.UnknownTopicOrPartition)})
			}
			return res, nil
		}
	}
	return u.RoundTripper.RoundTrip(ctx, addr, req)
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
