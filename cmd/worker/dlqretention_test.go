package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/testenv"
)

// A dead letter keeps its payload no longer than its event would have
// lived in Bigtable (for a listed tenant) or than --dlq-unlisted-retention
// (for an event without one), measured from the event's time: here a
// 20-second tenant's refused row and an unlisted tenant under
// unlisted_tenants: dead-letter each go to the 4-second class topic with
// their payload, and neither is readable there when the 20 seconds are up.
// A 3-second tenant's letter, shorter than any topic keeps a record, goes
// to the base topic without its payload; so does a malformed event's, whose
// tenant cannot be trusted: it may keep its payload no longer than the
// shortest TTL of the file, 3s.
func TestDeadLettersLiveNoLongerThanTheirTenant(t *testing.T) {
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	e := newEnv(t, "default_ttl: 1h\nunlisted_tenants: dead-letter\ntenants:\n  acme: 20s\n  tiny: 3s\n  globex: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	proxy.SetFault(func(*btpb.MutateRowsRequest) testenv.MutateRowsFault {
		return testenv.MutateRowsFault{Entry: func(key []byte) codes.Code {
			if bytes.HasPrefix(key, []byte("acme#")) || bytes.HasPrefix(key, []byte("tiny#")) {
				return codes.InvalidArgument
			}
			return codes.OK
		}}
	})
	stop, logs := e.startWorker(t, "--dlq-classes", "4s", "--dlq-unlisted-retention", "20s", "--dlq-check-interval", "1s")
	class := deadletter.ClassTopic(e.topic+".dlq", 4*time.Second)
	values := [][]byte{
		click{EventID: "a-1", TenantID: "acme", UserID: "u-1"}.bytes(),
		[]byte("not json"),
		click{EventID: "m-1", TenantID: "acmee", UserID: "u-2"}.bytes(),
		click{EventID: "t-1", TenantID: "tiny", UserID: "u-3"}.bytes(),
		click{EventID: "g-1", TenantID: "globex", UserID: "u-4"}.bytes(),
	}
	produced := time.Now()
	testenv.Produce(t, e.brokers, e.topic, values...)
	e.waitCommitted(t, 60*time.Second)
	if n := len(e.rows(t)); n != 1 {
		t.Errorf("%d rows, want globex's", n)
	}
	letters := testenv.ReadToEnd(t, e.brokers, class)
	if len(letters) != 2 {
		t.Fatalf("%d letters in %s, want 2 (acme refused, unlisted)", len(letters), class)
	}
	for _, m := range letters {
		if !slicesContain(values, m.Value) {
			t.Errorf("letter %q in %s without its payload", m.Value, class)
		}
		if strings.Contains(string(m.Value), `"acme"`) {
			ts := headerOf(m, deadletter.HeaderSourceTimestamp)
			src, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				t.Fatalf("source timestamp %q: %v", ts, err)
			}
			want := src.Truncate(time.Millisecond).Add(20 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00")
			if headerOf(m, deadletter.HeaderTenant) != "acme" || headerOf(m, deadletter.HeaderExpiresAt) != want {
				t.Errorf("acme's letter: tenant %q, expires_at %q, want acme, %s", headerOf(m, deadletter.HeaderTenant), headerOf(m, deadletter.HeaderExpiresAt), want)
			}
		}
	}
	var tiny, notJSON kafka.Message
	for _, m := range testenv.ReadToEnd(t, e.brokers, e.topic+".dlq") {
		switch {
		case headerOf(m, deadletter.HeaderTenant) == "tiny":
			tiny = m
		case headerOf(m, deadletter.HeaderReason) == "not_json":
			notJSON = m
		default:
			t.Errorf("letter in the base topic: %q, headers %v", m.Value, m.Headers)
		}
	}
	if notJSON.Value != nil || headerOf(notJSON, deadletter.HeaderPayload) != "omitted" {
		t.Errorf("the malformed event's letter: value %q, headers %v; want no payload", notJSON.Value, notJSON.Headers)
	}
	if tiny.Value != nil || tiny.Key != nil || headerOf(tiny, deadletter.HeaderPayload) != "omitted" || headerOf(tiny, deadletter.HeaderReason) != "bigtable_refused" ||
		headerOf(tiny, deadletter.HeaderOriginalSHA256) == "" || headerOf(tiny, deadletter.HeaderExpiresAt) == "" {
		t.Errorf("tiny's letter: value %q, headers %v; want no payload, the reason's class, the hash and expires_at", tiny.Value, tiny.Headers)
	}
	// The promise: unreadable by the time the events expire.
	time.Sleep(time.Until(produced.Add(20 * time.Second)))
	if left := testenv.ReadToEnd(t, e.brokers, class); len(left) != 0 {
		t.Errorf("%d letters still readable in %s when their events expired", len(left), class)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keeps_up_to=6s", "topic=" + class, "tiny 3s"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("start-up logs do not say %q", want)
		}
	}
}

func slicesContain(values [][]byte, v []byte) bool {
	for _, x := range values {
		if bytes.Equal(x, v) {
			return true
		}
	}
	return false
}

// A dead-letter topic that keeps records forever (retention.ms=-1, or
// cleanup.policy=compact) is refused: /readyz 503 with the fix, nothing
// dead-lettered there, the offset waits; fixed under the running worker,
// it is taken within --dlq-check-interval and the letter goes through.
// With --dlq-accept-unbounded it is used, for letters without payload.
func TestDeadLetterTopicsThatKeepForeverAreRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		config map[string]string
		fixed  string
	}{
		{"retention.ms=-1", map[string]string{"retention.ms": "-1"}, "retention.ms"},
		{"cleanup.policy=compact", map[string]string{"cleanup.policy": "compact"}, "cleanup.policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tenantsYAML)
			if out, err := e.cmd(t, "setup"); err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			dlq := e.topic + ".forever"
			testenv.CreateTopicWith(t, e.brokers, dlq, 1, tt.config)
			stop, logs := e.startWorker(t, "--dlq-topic", dlq, "--dlq-check-interval", "1s")
			url := adminURL(t, logs)
			testenv.Eventually(t, 20*time.Second, func() (bool, string) {
				code, body := testenv.Get(url + "/readyz")
				return code == 503 && strings.Contains(body, dlq) && strings.Contains(body, tt.name) && strings.Contains(body, "kafka-configs.sh"),
					"readyz " + body
			})
			testenv.Produce(t, e.brokers, e.topic, []byte("not json"))
			time.Sleep(3 * time.Second)
			if n := len(testenv.ReadToEnd(t, e.brokers, dlq)); n != 0 {
				t.Errorf("%d letters in a topic that keeps them forever", n)
			}
			committed, end := testenv.Offsets(t, e.brokers, e.group, e.topic, partitions)
			waiting := 0
			for p := range end {
				if max(committed[p], 0) < end[p] {
					waiting++
				}
			}
			if waiting != 1 {
				t.Errorf("%d partitions with uncommitted offsets, want the bad event's (committed %v, end %v)", waiting, committed, end)
			}
			alterTopic(t, e.brokers, dlq, map[string]string{"cleanup.policy": "delete", "retention.ms": "1800000", "segment.ms": "120000"})
			e.waitCommitted(t, 30*time.Second)
			if n := len(testenv.ReadToEnd(t, e.brokers, dlq)); n != 1 {
				t.Errorf("%d letters once the topic was fixed, want 1", n)
			}
			testenv.Eventually(t, 5*time.Second, func() (bool, string) { // checked every --readiness-interval
				code, body := testenv.Get(url + "/readyz")
				return code == 200, fmt.Sprintf("readyz %d once fixed: %s", code, body)
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("accepted", func(t *testing.T) {
		e := newEnv(t, tenantsYAML)
		if out, err := e.cmd(t, "setup"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
		dlq := e.topic + ".forever"
		testenv.CreateTopicWith(t, e.brokers, dlq, 1, map[string]string{"retention.ms": "-1"})
		stop, logs := e.startWorker(t, "--dlq-topic", dlq, "--dlq-accept-unbounded")
		testenv.Produce(t, e.brokers, e.topic, []byte("not json"))
		e.waitCommitted(t, 30*time.Second)
		got := testenv.ReadToEnd(t, e.brokers, dlq)
		if len(got) != 1 || got[0].Value != nil || headerOf(got[0], deadletter.HeaderPayload) != "omitted" {
			t.Errorf("letters %v, want one without payload", got)
		}
		testenv.Eventually(t, 5*time.Second, func() (bool, string) {
			code, body := testenv.Get(adminURL(t, logs) + "/readyz")
			return code == 200, fmt.Sprintf("readyz %d with the topic accepted: %s", code, body)
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// A dead-letter topic the worker creates carries its own cleanup.policy and
// retention.ms, set on the topic rather than inherited: the broker's defaults
// (7 days, or compaction on some managed clusters) are what a letter must
// not be kept by. Read back from the broker: the base topic with
// --dlq-retention, each class with its own, segments a twelfth of it.
func TestDeadLetterTopicsCreatedWithTheirRetention(t *testing.T) {
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
		for name, value := range map[string]string{"cleanup.policy": "delete", "retention.ms": retention, "segment.ms": segment} {
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
	// A dead-letter topic made by hand with fewer partitions than the input
	// takes letters all the same, and the worker says it falls short.
	small := testenv.Name("small")
	testenv.CreateTopic(t, e.brokers, small, 2)
	stop, logs = e.startWorker(t, "--topic", input, "--dlq-topic", small)
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(adminURL(t, logs) + "/status")
		return code == 200 && strings.Contains(body, `"short_of": "2 partitions, fewer than 7"`), fmt.Sprintf("status %d: %s", code, body)
	})
	if n := strings.Count(logs.String(), "fewer partitions or replicas than the worker would create it with"); n != 1 {
		t.Errorf("the shortfall is logged %d times, want once:\n%s", n, logs.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// replicasOf is the replication factor of topic's first partition.
func replicasOf(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	if tp := topicOf(t, brokers, topic); tp != nil && len(tp.Partitions) > 0 {
		return len(tp.Partitions[0].Replicas)
	}
	return 0
}

// partitionsOf is how many partitions topic has (0 when it does not exist).
func partitionsOf(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	if tp := topicOf(t, brokers, topic); tp != nil {
		return len(tp.Partitions)
	}
	return 0
}

// topicOf is topic as the metadata gives it, nil when it does not exist.
func topicOf(t *testing.T, brokers []string, topic string) *kafka.Topic {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	md, err := c.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range md.Topics {
		if md.Topics[i].Name == topic && md.Topics[i].Error == nil {
			return &md.Topics[i]
		}
	}
	return nil
}

// configSourceTopic is DescribeConfigs' DYNAMIC_TOPIC_CONFIG: a setting of
// the topic itself, not the broker's default.
const configSourceTopic = 1

// topicConfigs reads a topic's configs from the broker, by name.
func topicConfigs(t *testing.T, brokers []string, topic string) map[string]kafka.DescribeConfigResponseConfigEntry {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	res, err := c.DescribeConfigs(context.Background(), &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"cleanup.policy", "retention.ms", "segment.ms"}}}})
	if err == nil && len(res.Resources) != 1 {
		err = fmt.Errorf("%d resources in the answer", len(res.Resources))
	}
	if err == nil {
		err = res.Resources[0].Error
	}
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	out := map[string]kafka.DescribeConfigResponseConfigEntry{}
	for _, e := range res.Resources[0].ConfigEntries {
		out[e.ConfigName] = e
	}
	return out
}

// alterTopic replaces a topic's configs.
func alterTopic(t *testing.T, brokers []string, topic string, configs map[string]string) {
	t.Helper()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	var cs []kafka.AlterConfigRequestConfig
	for k, v := range configs {
		cs = append(cs, kafka.AlterConfigRequestConfig{Name: k, Value: v})
	}
	res, err := c.AlterConfigs(context.Background(), &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, Configs: cs}}})
	if err == nil {
		for _, e := range res.Errors {
			if e != nil {
				err = e
			}
		}
	}
	if err != nil {
		t.Fatalf("alter %s: %v", topic, err)
	}
}

// Kafka applies a topic's new settings to the records already there: a
// dead-letter topic whose keep grows under the worker holds letters placed
// for the shorter one past their events. /readyz says so, with the fix,
// until the keep comes back (or the new one has passed over them).
func TestDeadLetterTopicKeepGrown(t *testing.T) {
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
	alterTopic(t, e.brokers, e.topic+".dlq", map[string]string{"retention.ms": "7200000", "segment.ms": "120000"})
	testenv.Eventually(t, 20*time.Second, func() (bool, string) {
		code, body := testenv.Get(url + "/readyz")
		return code == 503 && strings.Contains(body, "keeps records up to 2h2m1s") && strings.Contains(body, "was 32m1s"), body
	})
	alterTopic(t, e.brokers, e.topic+".dlq", testenv.DeadLetterConfigs)
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
