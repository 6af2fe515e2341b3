package deadletter

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A dead-letter topic set back to LogAppendTime after a letter was stamped
// ten years ahead under CreateTime is not trusted at once: Kafka deletes a
// partition's segments oldest first, each once its newest record is past
// retention.ms, so that letter keeps its segment and every later one ten
// years, whatever the settings say now. The worker's check finds it in
// the broker's time index, keeps no payload there (keeps 0), says where
// (/status short_of) and logs the fix once; the retention statement reads
// the same. A topic stamped by the broker from the start is trusted.
// Against the real broker: the stand-in has no time index to search.
func TestTopicSetBackToLogAppendTimeHoldsALetterStampedAhead(t *testing.T) {
	testenv.NeedsBroker(t, "a topic's time index, searched by timestamp")
	testenv.BrokerVersionMatters(t, "ListOffsets by timestamp over segments appended under CreateTime")
	brokers := testenv.Kafka(t)
	frozen, clean := testenv.Name("ahead"), testenv.Name("clean")
	testenv.CreateTopicWith(t, brokers, frozen, 2, testenv.AnyTimeAhead(map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000",
		"segment.ms": "600000", "message.timestamp.type": "CreateTime"}))
	testenv.CreateTopicWith(t, brokers, clean, 2, testenv.DeadLetterConfigs)
	ahead := time.Now().AddDate(10, 0, 0).Truncate(time.Millisecond)
	testenv.ProduceMessages(t, brokers, frozen, kafka.Message{Value: []byte("a letter stamped ahead"), Time: ahead})
	testenv.ProduceMessages(t, brokers, clean, kafka.Message{Value: []byte("a letter")})

	var logs bytes.Buffer
	d, err := NewWriter(brokers, Topics{Base: frozen, Retention: time.Hour}, kafkaconn.Security{}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	res, err := d.client.AlterConfigs(t.Context(), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: frozen, Configs: []kafka.AlterConfigRequestConfig{
			{Name: "cleanup.policy", Value: "delete"}, {Name: "retention.ms", Value: "3600000"}, {Name: "segment.ms", Value: "600000"},
			{Name: "message.timestamp.type", Value: "LogAppendTime"}}}}})
	if err == nil {
		err = errors.Join(slices.Collect(maps.Values(res.Errors))...)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitSettings(t, brokers, frozen, func(r TopicRetention) bool { return r.Stamping.Type == "LogAppendTime" })
	for range 2 { // the second check says nothing new
		if _, err := d.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	r := d.Topics()[0]
	if r.Keeps != 0 || !strings.Contains(r.Ahead, "holds a record stamped "+ahead.UTC().Format(time.RFC3339)) ||
		!strings.Contains(r.ShortOf, "stamped") {
		t.Errorf("set back to LogAppendTime over a letter stamped %s: keeps %s, ahead %q, short of %q; want 0, that letter named", ahead, r.Keeps, r.Ahead, r.ShortOf)
	}
	if n := strings.Count(logs.String(), "holds a record stamped past"); n != 1 || !strings.Contains(logs.String(), "kafka-delete-records.sh") {
		t.Errorf("%d warnings of the letter stamped ahead over two checks, want 1 with the fix:\n%s", n, logs.String())
	}

	read, err := ReadTopics(t.Context(), brokers, kafkaconn.Security{}, []string{frozen, clean})
	if err != nil {
		t.Fatal(err)
	}
	if read[0].Keeps != 0 || read[0].Ahead == "" {
		t.Errorf("the statement's reading of %s: keeps %s, ahead %q; want 0 and the letter named", frozen, read[0].Keeps, read[0].Ahead)
	}
	if read[1].Keeps <= 0 || read[1].Ahead != "" {
		t.Errorf("the statement's reading of %s, stamped by the broker from the start: keeps %s, ahead %q; want its settings' keep", clean, read[1].Keeps, read[1].Ahead)
	}
}
