package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// A dead letter keeps its payload no longer than its event would have
// lived in Bigtable (for a listed tenant) or than --dlq-unlisted-retention
// (for an event without one), measured from the event's time: here a
// 30-second tenant's refused row and an unlisted tenant under
// unlisted_tenants: dead-letter each go to the 4-second class topic (it
// keeps 6 s, and a placement spares 10 s for the worker's clock) with
// their payload, and neither is readable there when the 30 seconds are up.
// A 3-second tenant's letter, shorter than any topic keeps a record, goes
// to the base topic without its payload; so does a malformed event's, whose
// tenant cannot be trusted: it may keep its payload no longer than the
// shortest TTL of the file, 3s.
func TestDeadLettersLiveNoLongerThanTheirTenant(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the broker deleting a topic's records at its retention")
	testenv.NeedsBroker(t, "its log.retention.check.interval.ms (a class topic of seconds keeps letters only under a check of a second)")
	proxy := testenv.StartBigtableProxy(t, testenv.Bigtable(t))
	t.Setenv("BIGTABLE_EMULATOR_HOST", proxy.Addr)
	e := newEnv(t, "default_ttl: 1h\nunlisted_tenants: dead-letter\ntenants:\n  acme: 30s\n  tiny: 3s\n  globex: 1h\n")
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
	stop, logs := e.startWorker(t, "--dlq-classes", "4s", "--dlq-unlisted-retention", "30s", "--dlq-check-interval", "1s")
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
			want := src.Truncate(time.Millisecond).Add(30 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z07:00")
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
		headerOf(tiny, deadletter.HeaderOriginalSHA256) != "" || headerOf(tiny, deadletter.HeaderExpiresAt) == "" {
		// No digest of the value: a short value is a dictionary away from
		// its plain SHA-256, and these letters are not signed.
		t.Errorf("tiny's letter: value %q, headers %v; want no payload, the reason's class, expires_at and no digest", tiny.Value, tiny.Headers)
	}
	// The promise: unreadable by the time the events expire.
	time.Sleep(time.Until(produced.Add(30 * time.Second)))
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
	testenv.BrokerVersionMatters(t, "the retention settings the broker gives a new topic")
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
			testenv.AlterTopic(t, e.brokers, dlq, map[string]string{"cleanup.policy": "delete", "retention.ms": "1800000", "segment.ms": "120000"})
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
