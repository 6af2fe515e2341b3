package kafkaconn

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A topic's id names its incarnation: the same for every read, another
// once the topic is deleted and created again under its name.
func TestTopicID(t *testing.T) {
	testenv.BrokerVersionMatters(t, "topic IDs in Metadata answers")
	brokers := testenv.Kafka(t)
	topic := testenv.Name("incarnation")
	testenv.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	first, err := TopicID(ctx, brokers, Security{}, topic)
	if err != nil || len(first) != 22 {
		t.Fatalf("id %q, %v: want Kafka's 22 characters", first, err)
	}
	// A reader keeps its connection, and dials again when the broker
	// closed it.
	r := NewTopicIDReader(brokers, Security{}, topic)
	defer r.Close()
	for i := range 3 {
		if again, err := r.Read(ctx); err != nil || again != first {
			t.Errorf("read %d by a reader: %q, %v; want %q", i, again, err, first)
		}
	}
	kept := r.pc
	_ = kept.Close() // as a broker closes an idle connection
	if again, err := r.Read(ctx); err != nil || again != first || r.pc == kept {
		t.Errorf("read on a connection the broker closed: %q, %v (connection replaced: %v); want %q on a new one", again, err, r.pc != kept, first)
	}
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: &kafka.Transport{}}
	defer c.Transport.(*kafka.Transport).CloseIdleConnections()
	if _, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}}); err != nil {
		t.Fatal(err)
	}
	var second string
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}}})
		if err == nil {
			second, err = TopicID(ctx, brokers, Security{}, topic)
		}
		return err == nil && second != "", "the topic created again: " + second
	})
	if second == first {
		t.Errorf("the topic created again has the id of the one deleted: %s", first)
	}
	if now, err := r.Read(ctx); err != nil || now != second {
		t.Errorf("the reader, after the topic was created again: %q, %v; want %q", now, err, second)
	}
	if _, err := TopicID(ctx, brokers, Security{}, testenv.Name("absent")); err == nil || !strings.Contains(err.Error(), "metadata of") {
		t.Errorf("a missing topic: %v", err)
	}
}

// A broker's answer is input too: a size past the bound, one too small,
// another request's answer, tags that do not fit are errors, never an
// allocation of what the answer claims.
func TestTopicIDAnswerIsBounded(t *testing.T) {
	frame := func(size int32, body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(size)), body...)
	}
	for name, in := range map[string][]byte{
		"past the bound":       frame(1<<30, nil),
		"negative":             frame(-1, nil),
		"too small":            frame(3, []byte{0, 0, 0}),
		"another request":      frame(5, []byte{0, 0, 0, 2, 0}),
		"cut short":            frame(100, []byte{0, 0, 0, 1, 0}),
		"tags past the end":    frame(6, []byte{0, 0, 0, 1, 1, 7}),
		"a tag's size past it": frame(8, []byte{0, 0, 0, 1, 1, 0, 100, 0}),
		"more tags than bytes": frame(5, []byte{0, 0, 0, 1, 0xff}),
	} {
		if _, err := readAnswer(bytes.NewReader(in), 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	body, err := readAnswer(bytes.NewReader(frame(9, []byte{0, 0, 0, 1, 1, 3, 1, 9, 42})), 1)
	if err != nil || !bytes.Equal(body, []byte{42}) {
		t.Errorf("an answer with a tag: %v %v", body, err)
	}
}

func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 1, 0, 42})
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = readAnswer(bytes.NewReader(in), 1)
	})
}

// A read cut short by its caller's context leaves the reader fit for the
// next: the cut runs on the connection of that read, which is then not
// kept (a cut that comes after the answer would cut the next read). Run
// under -race: the cut once read the reader's connection while a failed
// read put it away.
func TestTopicIDReaderCutShort(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := NewTopicIDReader(c.ListenAddrs(), Security{}, "t")
	defer r.Close()
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*50*time.Microsecond)
		_, _ = r.Read(ctx)
		cancel()
	}
	if id, err := r.Read(context.Background()); err != nil || len(id) != 22 {
		t.Fatalf("after reads cut short: %q, %v; want the topic's id", id, err)
	}
}
