package main

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A record may carry no timestamp (Kafka's -1): legal in a v2 batch, and
// exempt from message.timestamp.after.max.ms. An event that gives its own
// time in such a record has nothing to bound that time by. On a topic that
// bounds producers' timestamps (the worker's --max-clock-skew), acme's
// (1h) event claiming 2286 was written with a cell in 2286: now it is a
// dead letter, no_record_time, and so is one that claims an honest time;
// worker redrive decides the letters the same way. An event without its
// own time in a record without one was, and stays, missing its time.
// Against the real broker and emulator.
func TestEventTimeWithoutRecordTimeIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"message.timestamp.after.max.ms": "300000"})
	noTime := time.UnixMilli(-1) // kafka-go writes a non-zero Time as given: -1
	msg := func(id, at string, ts time.Time) kafka.Message {
		return kafka.Message{Value: click{EventID: id, TenantID: "acme", UserID: "u-1", OccurredAt: at}.bytes(), Time: ts}
	}
	now := time.Now().UTC()
	testenv.ProduceMessages(t, e.brokers, e.topic,
		msg("e-2286", "2286-11-20T00:00:00Z", noTime),
		msg("e-now", now.Format(time.RFC3339Nano), noTime),
		msg("e-none", "", noTime),
		msg("e-ok", now.Format(time.RFC3339Nano), now))

	stop, _ := e.startWorker(t)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows := e.rows(t)
	if len(rows) != 1 {
		t.Errorf("%d rows, want e-ok's alone", len(rows))
	}
	for key, row := range rows {
		if !strings.HasSuffix(key, "#e-ok") {
			t.Errorf("row %s written", key)
		}
		for _, cell := range row["c"] {
			if cell.Timestamp.Time().After(now.Add(-47 * time.Hour).Add(time.Minute)) {
				t.Errorf("%s: cell at %s, past acme's hour from the record's time", key, cell.Timestamp.Time())
			}
		}
	}
	classes := map[string]string{}
	for _, l := range testenv.ReadAll(t, e.brokers, e.topic+".dlq", 3, 20*time.Second) {
		for _, id := range []string{"e-2286", "e-now", "e-none"} {
			if strings.Contains(string(l.Value), `"`+id+`"`) {
				classes[id] = letterHeader(l, deadletter.HeaderReasonClass)
			}
		}
	}
	if classes["e-2286"] != "no_record_time" || classes["e-now"] != "no_record_time" || classes["e-none"] != "missing" {
		t.Errorf("dead letters by class %v: want no_record_time for the events with their own time, missing for e-none", classes)
	}

	out, err := e.cmd(t, "redrive", "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic, "--apply", "--trust-unsigned-letters")
	if got := strings.Join(strings.Fields(out), " "); err != nil || !strings.Contains(got, "no_record_time still_rejected 2") {
		t.Errorf("redrive: %v\n%s", err, out)
	}
	if rows := e.rows(t); len(rows) != 1 {
		t.Errorf("%d rows after the redrive, want e-ok's alone", len(rows))
	}
}

// A topic of message.timestamp.type=LogAppendTime: Kafka applies no
// after.max.ms there, sets each batch's time to its own clock and leaves
// each record's own stamp as produced. The worker reads the broker's time,
// as Kafka's own consumer does: acme's (1h) event stamped 2200, record
// and event alike, is clamped to the broker's time + --max-clock-skew,
// not written with a cell in 2199; a record produced without a time has
// the broker's, so its event is written, not lettered no_record_time; and
// the topic is bounded, so a --strict-retention worker runs on it.
// Against the real broker and emulator.
func TestLogAppendTimeTopicIsStampedByTheBroker(t *testing.T) {
	t.Parallel()
	testenv.NeedsBroker(t, "the broker's own time on a LogAppendTime topic")
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "300000"})
	future := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	msg := func(id string, at, ts time.Time) kafka.Message {
		return kafka.Message{Value: click{EventID: id, TenantID: "acme", UserID: "u-1", OccurredAt: at.Format(time.RFC3339Nano)}.bytes(), Time: ts}
	}
	before := time.Now().UTC()
	testenv.ProduceMessages(t, e.brokers, e.topic,
		msg("e-2200", future, future),
		msg("e-untimed", before, time.UnixMilli(-1)),
		msg("e-ok", before, before))
	after := time.Now().UTC()

	stop, logs := e.startWorker(t, "--strict-retention")
	if rt := recordTimestamps(t, adminURL(t, logs)); !rt.Bounded || rt.Type != "LogAppendTime" {
		t.Errorf("a LogAppendTime topic: %+v, want bounded", rt)
	}
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// acme lives 1h under the default 2d: its cells lie 47h before the
	// time its hour counts from, at most the broker's clock + 5m.
	latest := after.Add(5 * time.Minute).Add(-47 * time.Hour)
	written := map[string]bool{}
	for key, row := range e.rows(t) {
		written[key[strings.LastIndex(key, "#")+1:]] = true
		for _, cell := range row["c"] {
			if ts := cell.Timestamp.Time(); ts.After(latest.Add(time.Second)) {
				t.Errorf("%s: cell at %s, past %s: the producer's stamp bought it time", key, ts, latest)
			}
		}
	}
	if len(written) != 3 || !written["e-2200"] || !written["e-untimed"] || !written["e-ok"] {
		t.Errorf("rows of %v, want e-2200, e-untimed and e-ok", written)
	}
	e.expectNoDeadLetters(t)
}
