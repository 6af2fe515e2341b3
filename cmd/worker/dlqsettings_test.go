package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Kafka applies a topic's new settings to the records already there: a
// dead-letter topic whose keep grows under the worker holds letters placed
// for the shorter one past their events. /readyz says so, with the fix,
// until the keep comes back (or the new one has passed over them).
func TestDeadLetterTopicKeepGrown(t *testing.T) {
	testenv.NeedsBroker(t, "the retention check its keeps count")
	t.Parallel()
	e := newEnv(t, tenantsYAML) // its dead-letter topic keeps 30m + 2m + the check
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t, "--dlq-check-interval", "1s")
	url := adminURL(t, logs)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 200, body
	})
	testenv.AlterTopic(t, e.brokers, e.topic+".dlq", map[string]string{"retention.ms": "7200000", "segment.ms": "120000", "message.timestamp.type": "LogAppendTime"})
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 503 && strings.Contains(body, "keeps records up to 2h2m1s") && strings.Contains(body, "was 32m1s"), body
	})
	testenv.AlterTopic(t, e.brokers, e.topic+".dlq", testenv.DeadLetterConfigs)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 200, body
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A dead-letter topic whose settings can no longer be read gets letters
// without their payload, and /readyz says why, until they can be read
// again: the last reading may no longer hold (its retention may have been
// raised meanwhile), so a letter must not keep its payload on it. Against
// the real broker, the worker's principal denied DESCRIBE_CONFIGS on the
// topic while it runs.
func TestDeadLetterSettingsUnreadableKeepNoPayload(t *testing.T) {
	t.Parallel()
	e, saslArgs, acl := saslEnv(t)
	dlq := testenv.Name("dead")
	testenv.CreateTopicWith(t, e.brokers, dlq, 1, testenv.DeadLetterConfigs)
	stop, logs := e.startWorker(t, append(saslArgs, "--dlq-topic", dlq, "--dlq-check-interval", "1s")...)
	url := adminURL(t, logs)
	testenv.Produce(t, e.brokers, e.topic, []byte("not json 1"))
	e.waitCommitted(t, 30*time.Second)

	acl(kafka.ACLOperationTypeDescribeConfigs, dlq, true)
	t.Cleanup(func() { acl(kafka.ACLOperationTypeDescribeConfigs, dlq, false) })
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 503 && strings.Contains(body, "could not be read") && strings.Contains(body, dlq), fmt.Sprintf("readyz %d: %s", code, body)
	})
	testenv.Produce(t, e.brokers, e.topic, []byte("not json 2"))
	e.waitCommitted(t, 30*time.Second)

	acl(kafka.ACLOperationTypeDescribeConfigs, dlq, false)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 200, fmt.Sprintf("readyz %d once readable: %s", code, body)
	})
	testenv.Produce(t, e.brokers, e.topic, []byte("not json 3"))
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := testenv.ReadToEnd(t, e.brokers, dlq)
	var values []string
	for _, m := range got {
		values = append(values, fmt.Sprintf("%q", m.Value))
	}
	if want := `"not json 1" "" "not json 3"`; strings.Join(values, " ") != want {
		t.Errorf("letters' payloads %s, want %s: none while the settings could not be read", strings.Join(values, " "), want)
	}
}

// A dead-letter topic the worker creates carries its own cleanup.policy and
// retention.ms, set on the topic rather than inherited: the broker's defaults
// (7 days, or compaction on some managed clusters) are what a letter must
// not be kept by. Read back from the broker: the base topic with
// --dlq-retention, each class with its own, segments a twelfth of it.
func TestDeadLetterTopicsCreatedWithTheirRetention(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the retention settings the broker gives a new topic")
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	dlq := e.topic + ".made"
	stop, logs := e.startWorker(t, "--dlq-topic", dlq, "--dlq-retention", "45m", "--dlq-classes", "12s,2h")
	want := map[string]string{dlq: "2700000", deadletter.ClassTopic(dlq, 12*time.Second): "12000", deadletter.ClassTopic(dlq, 2*time.Hour): "7200000"}
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		for topic := range want {
			if !strings.Contains(logs.String(), `msg="dead-letter topic ready" topic=`+topic+" created=true") {
				return false, "the worker has not created " + topic
			}
		}
		return true, ""
	})
	for topic, retention := range want {
		ms, _ := strconv.ParseInt(retention, 10, 64)
		segment := strconv.FormatInt(max(ms/12, 1000), 10)
		got := topicConfigs(t, e.brokers, topic)
		for name, value := range map[string]string{"cleanup.policy": "delete", "retention.ms": retention, "segment.ms": segment, "message.timestamp.type": "LogAppendTime"} {
			if c, ok := got[name]; !ok || c.ConfigValue != value || c.ConfigSource != configSourceTopic {
				t.Errorf("%s: %s = %q (source %d), want %q set on the topic (source %d)", topic, name, c.ConfigValue, c.ConfigSource, value, configSourceTopic)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// As many partitions as the input topic by default, not the broker's
	// default (one on Apache Kafka's, where a burst of one producer's bad
	// events queues); --dlq-partitions sets it.
	input := testenv.Name("clicks7")
	testenv.CreateTopic(t, e.brokers, input, 7)
	for _, c := range []struct {
		args []string
		want int
	}{{nil, 7}, {[]string{"--dlq-partitions", "5"}, 5}} {
		made := testenv.Name("made")
		stop, _ = e.startWorker(t, append([]string{"--topic", input, "--dlq-topic", made}, c.args...)...)
		testenv.Eventually(t, 20*time.Second, func() (bool, string) {
			n := partitionsOf(t, e.brokers, made)
			return n == c.want, fmt.Sprintf("%s %v has %d partitions, want %d", made, c.args, n, c.want)
		})
		if got := replicasOf(t, e.brokers, made); got != 1 {
			// 3 capped at the brokers: the test cluster has one.
			t.Errorf("%s %v has replication factor %d, want 1 (3 capped at one broker)", made, c.args, got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	// A dead-letter topic made by hand with fewer partitions than the input,
	// and Kafka's default stamping, takes letters all the same, and the
	// worker says it falls short.
	small := testenv.Name("small")
	testenv.CreateTopicWith(t, e.brokers, small, 2, testenv.AnyTimeAhead(nil))
	stop, logs = e.startWorker(t, "--topic", input, "--dlq-topic", small)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(adminURL(t, logs) + "/status")
		return code == 200 && strings.Contains(body, `"short_of": "2 partitions, fewer than 7 and message.timestamp.type CreateTime, not LogAppendTime"`) &&
			strings.Contains(body, `"stamping": "message.timestamp.type=CreateTime with message.timestamp.after.max.ms unbounded`), fmt.Sprintf("status %d: %s", code, body)
	})
	if n := strings.Count(logs.String(), "fewer partitions or replicas than the worker would create it with"); n != 1 {
		t.Errorf("the shortfall is logged %d times, want once:\n%s", n, logs.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
