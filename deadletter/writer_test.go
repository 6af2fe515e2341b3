package deadletter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/internal/kafkaconn"
	"github.com/cellttl/cellttl/testkit/testenv"
)

func header(m kafka.Message, key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// A dead letter that fits is sent whole; one byte more and its value is cut
// to fit, with its size and SHA-256; if the original headers or key alone
// do not leave room, they go too, and a header says so.
func TestDeadLetterFitsAtTheEdge(t *testing.T) {
	src := ingest.Message{Topic: "clicks", Partition: 3, Offset: 77, Key: []byte("user-9"), Time: time.UnixMilli(1_777_000_000_123),
		Headers: []ingest.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}
	dl := func(value []byte) Letter {
		m := src
		m.Value = value
		return Letter{Msg: m, Reason: "value is too large", Field: ""}
	}
	const max = 20000
	whole, _ := letterMessage(dl(nil), max, true)
	exact := bytes.Repeat([]byte("v"), int(max-messageSize(whole)))
	m, cut := letterMessage(dl(exact), max, true)
	if cut || !bytes.Equal(m.Value, exact) || messageSize(m) != max {
		t.Fatalf("a dead letter of exactly %d bytes: cut %t, size %d", max, cut, messageSize(m))
	}
	over := append(exact, 'w')
	m, cut = letterMessage(dl(over), max, true)
	if !cut || messageSize(m) > max {
		t.Fatalf("one byte over: cut %t, size %d", cut, messageSize(m))
	}
	sum := sha256.Sum256(over)
	if v, _ := header(m, HeaderTruncated); v != "true" {
		t.Errorf("truncated header %q", v)
	}
	if v, _ := header(m, HeaderOriginalSize); v != strconv.Itoa(len(over)) {
		t.Errorf("original size header %q, want %d", v, len(over))
	}
	if v, _ := header(m, HeaderOriginalSHA256); v != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 header %q", v)
	}
	if !bytes.HasPrefix(over, m.Value) || len(m.Value) == 0 {
		t.Errorf("value is not a prefix of the original (%d bytes)", len(m.Value))
	}
	if _, ok := header(m, "traceparent"); !ok || !bytes.Equal(m.Key, src.Key) {
		t.Error("original key and headers dropped although they fit")
	}

	// Original headers that leave no room: dropped, and said so.
	big := src
	big.Headers = []ingest.Header{{Key: "huge", Value: bytes.Repeat([]byte("h"), max)}}
	m, _ = letterMessage(Letter{Msg: big, Reason: "r"}, max, true)
	if v, _ := header(m, HeaderDropped); v != "headers" || messageSize(m) > max || !bytes.Equal(m.Key, src.Key) {
		t.Errorf("huge headers: dropped %q, size %d, key %q", v, messageSize(m), m.Key)
	}
	// A key that leaves no room: the key goes too.
	big.Key = bytes.Repeat([]byte("k"), max)
	m, _ = letterMessage(Letter{Msg: big, Reason: "r"}, max, true)
	if v, _ := header(m, HeaderDropped); v != "headers,key" || m.Key != nil || messageSize(m) > max {
		t.Errorf("huge key: dropped %q, size %d", v, messageSize(m))
	}
	for _, h := range m.Headers {
		if strings.HasPrefix(h.Key, "cellttl.source.") && len(h.Value) == 0 {
			t.Errorf("header %s empty", h.Key)
		}
	}
}

// The real broker takes every dead letter, at and around the edge of the
// topic's max.message.bytes, several to a batch: the size estimate is never
// below what the broker counts.
func TestDeadLettersFitTheBroker(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker's max.message.bytes and what a batch adds to a record")
	brokers := testenv.Kafka(t)
	topic := testenv.Name("dlq")
	const limit = 20000
	testenv.CreateTopicWith(t, brokers, topic, 1, map[string]string{"max.message.bytes": strconv.Itoa(limit), "retention.ms": "3600000", "segment.ms": "300000", "message.timestamp.type": "LogAppendTime"})
	d, err := NewWriter(brokers, Topics{Base: topic, Retention: time.Hour}, kafkaconn.Security{}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info, err := d.Check(context.Background())
	if err != nil || len(info) != 1 || info[0].MaxMessageBytes != limit || info[0].Created || info[0].Keeps < time.Hour+5*time.Minute {
		t.Fatalf("check: %+v, %v", info, err)
	}
	// Every letter has days to live: each keeps its payload.
	expires := time.Now().Add(72 * time.Hour)
	base, _ := letterMessage(Letter{Msg: ingest.Message{Topic: "in", Offset: 1}, Reason: "r"}, limit, true)
	room := int(limit - recordBatchOverhead - messageSize(base) - placedBytes) // the worker adds when it placed the letter
	var dls []Letter
	for i, n := range []int{room - 1, room, room + 1, 2 * limit, 10 * limit} {
		dls = append(dls, Letter{Msg: ingest.Message{Topic: "in", Offset: int64(i), Value: bytes.Repeat([]byte{'a' + byte(i)}, n)}, Reason: "r", KeepUntil: expires})
	}
	if err := d.Write(context.Background(), dls); err != nil {
		t.Fatalf("the broker refused dead letters fitted to its limit: %v", err)
	}
	got := testenv.ReadAll(t, brokers, topic, len(dls), 20*time.Second)
	if len(got) != len(dls) {
		t.Fatalf("%d dead letters in the topic, want %d", len(got), len(dls))
	}
	for i, m := range got {
		_, cut := header(m, HeaderTruncated)
		if want := i >= 2; cut != want {
			t.Errorf("dead letter of %d bytes: truncated %t, want %t", len(dls[i].Msg.Value), cut, want)
		}
		if !bytes.HasPrefix(dls[i].Msg.Value, m.Value) {
			t.Errorf("dead letter %d: value is not a prefix of the original", i)
		}
	}
}

// A produce error time should heal is quiet at first, and reported once it
// has lasted a minute (a topic deleted under the worker, replicas that never
// come back); one time does not heal is reported at once; a produce that
// goes through clears both.
func TestDeadLetterProblemsBecomeLoud(t *testing.T) {
	d := &Writer{topics: Topics{Base: "dlq"}, log: quiet}
	clock := time.Unix(1_800_000_000, 0)
	d.now = func() time.Time { return clock }
	transient := func() *ProduceError { return &ProduceError{Err: kafka.NotEnoughReplicas} }
	d.produced(transient())
	if err := d.Problem(); err != nil {
		t.Fatalf("a first transient error reported: %v", err)
	}
	clock = clock.Add(59 * time.Second)
	d.produced(transient())
	if err := d.Problem(); err != nil {
		t.Fatalf("a transient error of 59s reported: %v", err)
	}
	clock = clock.Add(time.Second)
	d.produced(transient())
	if err := d.Problem(); err == nil || !strings.Contains(err.Error(), "failing for 1m0s") {
		t.Fatalf("a transient error lasting a minute: %v", err)
	}
	d.produced(nil)
	if err := d.Problem(); err != nil {
		t.Fatalf("after a produce went through: %v", err)
	}
	d.produced(&ProduceError{Err: kafka.TopicAuthorizationFailed, Permanent: true})
	if err := d.Problem(); err == nil {
		t.Fatal("a permanent error not reported at once")
	}
}

// The dead letter's own timestamp is its produce time: a topic bounding
// timestamps would refuse the original's (say, past 2286) forever. The
// original goes in a header.
func TestDeadLetterKeepsTheOriginalTimestampInAHeader(t *testing.T) {
	orig := time.UnixMilli(10_000_000_000_000)
	m, _ := letterMessage(Letter{Msg: ingest.Message{Topic: "in", Value: []byte("v"), Time: orig}, Reason: "r"}, 1<<20, true)
	if !m.Time.IsZero() {
		t.Errorf("dead letter stamped %s, want the produce time (zero: the producer's clock)", m.Time)
	}
	if v, _ := header(m, HeaderSourceTimestamp); v != "2286-11-20T17:46:40Z" {
		t.Errorf("source timestamp header %q", v)
	}
	m, _ = letterMessage(Letter{Msg: ingest.Message{Topic: "in", Value: []byte("v")}, Reason: "r"}, 1<<20, true)
	if v, ok := header(m, HeaderSourceTimestamp); !ok || v != "" {
		t.Errorf("a record without a timestamp: header %q (present %t), want empty", v, ok)
	}
}

// A record the fetcher held cut is dead-lettered with the size and hash of
// its whole value, even when what is left of it fits the topic, and says
// what the fetcher left out; an undecodable batch is one dead letter with
// no key or value that says which offsets it stands for and what it was.
func TestDeadLetterOfACutRecordAndAnUndecodableBatch(t *testing.T) {
	src := ingest.Message{Topic: "clicks", Partition: 2, Offset: 10, Value: []byte("first bytes"), Headers: []ingest.Header{{Key: "h", Value: []byte("v")}}}
	cut := &ingest.Cut{Size: 5 << 20, SHA256: sha256.Sum256([]byte("all of it")), Dropped: "key"}
	m, truncated := letterMessage(Letter{Msg: src, Reason: "too large", Cut: cut}, 1<<20, true)
	if !truncated || string(m.Value) != "first bytes" {
		t.Errorf("cut record: truncated %v, value %q", truncated, m.Value)
	}
	for k, want := range map[string]string{HeaderTruncated: "true", HeaderOriginalSize: strconv.Itoa(5 << 20),
		HeaderOriginalSHA256: hex.EncodeToString(cut.SHA256[:]), HeaderDropped: "key", "h": "v"} {
		if v, _ := header(m, k); v != want {
			t.Errorf("cut record: header %s = %q, want %q", k, v, want)
		}
	}
	// Cut by the fetcher, then again to fit: both said.
	m, _ = letterMessage(Letter{Msg: ingest.Message{Value: bytes.Repeat([]byte("x"), 5000), Headers: []ingest.Header{{Key: "big", Value: make([]byte, 4000)}}},
		Reason: "too large", Cut: cut}, 4000, true)
	if v, _ := header(m, HeaderDropped); v != "headers,key" || messageSize(m) > 4000 {
		t.Errorf("cut twice: dropped %q, size %d", v, messageSize(m))
	}

	u := &ingest.Undecodable{Last: 66, Codec: "zstd", Size: 2508, SHA256: sha256.Sum256([]byte("batch")), Reason: "cannot be decoded"}
	m, truncated = letterMessage(Letter{Msg: ingest.Message{Topic: "clicks", Partition: 0, Offset: 6}, Reason: u.Reason, Undecodable: u}, 1<<20, true)
	if truncated || m.Key != nil || m.Value != nil {
		t.Errorf("undecodable batch: truncated %v, key %q, %d bytes of value", truncated, m.Key, len(m.Value))
	}
	for k, want := range map[string]string{HeaderSourceOffset: "6", HeaderSourceOffsetLast: "66", HeaderBatchCodec: "zstd",
		HeaderBatchSize: "2508", HeaderBatchSHA256: hex.EncodeToString(u.SHA256[:]), HeaderReason: "cannot be decoded", HeaderSourcePartition: "0"} {
		if v, _ := header(m, k); v != want {
			t.Errorf("undecodable batch: header %s = %q, want %q", k, v, want)
		}
	}
}

var quiet = slog.New(slog.DiscardHandler)

// A reason is cut to its bound, whatever it quotes: a schema a compiler
// quoted whole made a reason of 1.4 MB, and a letter the broker refused,
// for good.
func TestReasonIsBounded(t *testing.T) {
	m, _ := letterMessage(Letter{Msg: ingest.Message{Topic: "in", Value: []byte("v")}, Reason: strings.Repeat("schema text ", 120_000)}, 1<<22, true)
	r, _ := header(m, HeaderReason)
	if len(r) > bounded.Reason || !strings.HasSuffix(r, "bytes, cut)") {
		t.Errorf("a reason of %d bytes", len(r))
	}
}
