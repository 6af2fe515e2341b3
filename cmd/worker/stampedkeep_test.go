package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// An erased user stays erased through a replay however long a record of
// theirs stays in the input topic. Kafka deletes a segment only once its
// newest timestamp is past retention.ms, and segments only from the
// front: an event of u-1 appended before the erasure but stamped an hour
// ahead stays an hour past a topic's retention.ms (5 s here), and on a
// topic whose producers may stamp any time ahead (Kafka 3.x's default) as
// long as its producer says. The ledger record was sized by retention.ms +
// segment.ms alone and expired after a few seconds; a new group replaying
// the topic then wrote u-1's row again. The receipt now says the topic
// keeps records forever, names the setting that bounds it, and the record
// stays in force. Against the real broker and emulator.
func TestErasureOutlivesRecordsStampedAhead(t *testing.T) {
	testenv.BrokerVersionMatters(t, "how far ahead the broker lets a producer stamp a record")
	t.Parallel()
	e := newEnv(t, "default_ttl: 2d\ntenants:\n  acme: 10s\n")
	testenv.AlterTopic(t, e.brokers, e.topic, testenv.AnyTimeAhead(map[string]string{"retention.ms": "5000", "segment.ms": "2000"}))
	testenv.AlterTopic(t, e.brokers, e.topic+".dlq", map[string]string{"retention.ms": "5000", "segment.ms": "2000", "message.timestamp.type": "LogAppendTime"})
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	msg := func(id string, at time.Time) kafka.Message {
		return kafka.Message{Value: click{EventID: id, TenantID: "acme", UserID: "u-1"}.bytes(), Time: at}
	}
	testenv.ProduceMessages(t, e.brokers, e.topic, msg("e-now", time.Now()), msg("e-ahead", time.Now().Add(time.Hour)))

	out, err := e.cmd(t, "forget", "--tenant", "acme", "--user", "u-1", "--allow-empty", "--requested-by", "ticket-9",
		"--second-pass-after", "10ms", "--max-clock-skew", "1s", "--format", "json")
	var rc struct {
		Users []struct {
			Record struct{ Expires time.Time } `json:"ledger_record"`
		}
		Unreachable []struct {
			Store, Longest string
			DecidedBy      string `json:"decided_by"`
		} `json:"unreachable_stores"`
	}
	if err != nil || json.Unmarshal([]byte(out[:strings.Index(out, "\n")]), &rc) != nil || len(rc.Users) != 1 || len(rc.Unreachable) == 0 {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	input := rc.Unreachable[0]
	if !strings.HasPrefix(input.Store, "input topic") || input.Longest != "forever" || !strings.Contains(input.DecidedBy, "message.timestamp.after.max.ms unbounded") {
		t.Errorf("the receipt's input topic: %+v; want forever, for the unbounded timestamps", input)
	}
	if !rc.Users[0].Record.Expires.IsZero() {
		t.Errorf("the ledger record expires at %s, while the topic may hold u-1's event stamped ahead", rc.Users[0].Record.Expires)
	}

	// Past the life the record had (the topics' 5 s + 2 s + the broker's
	// 1 s check, and acme's 10 s from erased_up_to), a new group replays
	// the topic: e-now has expired, e-ahead is u-1's and is not written.
	time.Sleep(13 * time.Second)
	e.group = testenv.Name("replay")
	stop, _ := e.startWorker(t, "--erasure-refresh", "200ms")
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for key := range e.rows(t) {
		t.Errorf("row %s written by the replay: the erasure expired before u-1's event left the topic", key)
	}
}
