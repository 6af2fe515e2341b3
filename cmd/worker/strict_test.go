package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Under --strict-retention, an input topic relaxed while the worker runs
// stops the writes, not only /readyz: events produced meanwhile wait,
// uncommitted, neither written nor dead-lettered, until the topic bounds
// record timestamps again; then they are written. A record stamped an hour
// ahead, which only the relaxed topic let in, is dead-lettered (time_ahead)
// and never written, nor by worker redrive under the same rule. Against
// the real broker and emulator.
func TestStrictRetentionHoldsWritesWhileTopicRelaxed(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the topic settings strict retention watches")
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	bounded := map[string]string{"message.timestamp.after.max.ms": "300000"} // the default --max-clock-skew
	testenv.AlterTopic(t, e.brokers, e.topic, bounded)
	stop, logs := e.startWorker(t, "--strict-retention", "--dlq-check-interval", "500ms")
	url := adminURL(t, logs)
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-1", TenantID: "acme"}.bytes())
	e.waitRows(t, 1, 30*time.Second)

	testenv.AlterTopic(t, e.brokers, e.topic, map[string]string{"message.timestamp.after.max.ms": "9223372036854775807"})
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 503 && strings.Contains(body, "message.timestamp.after.max.ms unbounded"), body
	})
	testenv.Produce(t, e.brokers, e.topic, click{EventID: "e-2", TenantID: "acme"}.bytes(), click{EventID: "e-3", TenantID: "globex"}.bytes())
	testenv.ProduceMessages(t, e.brokers, e.topic, kafka.Message{Value: click{EventID: "e-ahead", TenantID: "acme"}.bytes(), Time: time.Now().Add(time.Hour)})
	// The letter of the record stamped ahead goes out meanwhile: the held
	// writes do not keep the dead letters waiting.
	if early := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 1, 20*time.Second); len(early) != 1 {
		t.Errorf("%d dead letters while the writes are held, want e-ahead's", len(early))
	}
	// Held: several checks and flushes later, still one row, and an offset
	// left uncommitted.
	time.Sleep(3 * time.Second)
	if rows := e.rows(t); len(rows) != 1 {
		t.Fatalf("%d rows while the topic is relaxed, want only the one written before", len(rows))
	}
	committed, end := testenv.Offsets(t, e.brokers, e.group, e.topic, partitions)
	if fmt.Sprint(committed) == fmt.Sprint(end) {
		t.Errorf("every offset committed (%v) while the writes are held", committed)
	}

	testenv.AlterTopic(t, e.brokers, e.topic, bounded)
	e.waitRows(t, 3, 30*time.Second)
	e.waitCommitted(t, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 200, body
	})
	for key := range e.rows(t) {
		if strings.HasSuffix(key, "#e-ahead") {
			t.Errorf("the record stamped ahead was written: %s", key)
		}
	}
	letters := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 2, 5*time.Second)
	if len(letters) != 1 || letterHeader(letters[0], deadletter.HeaderReasonClass) != "time_ahead" || !strings.Contains(string(letters[0].Value), "e-ahead") {
		t.Errorf("dead letters %d, want only e-ahead's, time_ahead: %+v", len(letters), letters)
	}
	_, body := testenv.MustGet(t, url+"/metrics")
	if v, _ := metricValue(body, "cellttl_dead_letters_total", `reason="time_ahead"`); v != 1 {
		t.Errorf("cellttl_dead_letters_total{reason=time_ahead} = %v, want 1", v)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// worker redrive decides the letter by the same rule under
	// --strict-retention (or CELLTTL_STRICT_RETENTION), and would write it
	// without.
	redrive := func(extra ...string) string {
		out, err := e.cmd(t, "redrive", append([]string{"--brokers", strings.Join(e.brokers, ","), "--topic", e.topic}, extra...)...)
		if err != nil {
			t.Fatalf("redrive %v: %v\n%s", extra, err, out)
		}
		return strings.Join(strings.Fields(out), " ")
	}
	if out := redrive("--strict-retention"); !strings.Contains(out, "time_ahead time_ahead 1") {
		t.Errorf("redrive --strict-retention: %s", out)
	}
	t.Setenv("CELLTTL_STRICT_RETENTION", "true")
	if out := redrive(); !strings.Contains(out, "time_ahead time_ahead 1") {
		t.Errorf("redrive with CELLTTL_STRICT_RETENTION: %s", out)
	}
	t.Setenv("CELLTTL_STRICT_RETENTION", "false")
	if out := redrive(); !strings.Contains(out, "time_ahead written 1") {
		t.Errorf("redrive without strict: %s", out)
	}
}

// letterHeader is the last header of a letter under key.
func letterHeader(m kafka.Message, key string) string {
	v := ""
	for _, h := range m.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}
