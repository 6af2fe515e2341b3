package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/testkit/testenv"
)

func headerOf(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Regression (a dead letter too large for its topic): an input topic that allows 4 MB, a
// dead-letter topic at the broker's default of 1 MiB. An event of 1.5 MiB
// (over --max-event-bytes) and an invalid one just under 1 MiB could not be
// dead-lettered (the produce failed forever and their partition's commits
// stopped, also across restarts). Now each dead letter is cut to fit, with
// the original size and SHA-256, and everything is committed.
func TestDeadLetterAlwaysFits(t *testing.T) {
	t.Parallel()
	e := &env{brokers: testenv.Kafka(t), topic: testenv.Name("big"), group: testenv.Name("group"), table: testenv.Name("table")}
	e.dc, e.ac = testenv.Clients(t)
	e.tenantsFile = t.TempDir() + "/tenants.yaml"
	e.writeTenants(t, tenantsYAML)
	t.Cleanup(func() {
		_ = e.ac.DeleteTable(context.Background(), e.table)
		_ = e.ac.DeleteTable(context.Background(), e.table+"-erasures")
	})
	testenv.CreateTopicWith(t, e.brokers, e.topic, partitions, map[string]string{"max.message.bytes": "4000000"})
	testenv.CreateTopicWith(t, e.brokers, e.topic+".dlq", 1, testenv.DeadLetterConfigs)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	stop, logs := e.startWorker(t)
	oversize := []byte(`{"event_id":"big","tenant_id":"acme","pad":"` + strings.Repeat("x", 1536<<10) + `"}`)
	notJSON := []byte(strings.Repeat("n", 1<<20-200))
	var values [][]byte
	for i := range 3 {
		values = append(values, click{EventID: fmt.Sprint("g-", i), TenantID: "acme", UserID: "u"}.bytes())
	}
	testenv.ProduceLarge(t, e.brokers, e.topic, values[0], oversize, values[1], notJSON, values[2])
	e.waitCommitted(t, 60*time.Second)
	if n := len(e.rows(t)); n != 3 {
		t.Errorf("%d rows, want the 3 good events", n)
	}
	dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 2, 20*time.Second)
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	for _, m := range dead {
		orig := oversize
		if !strings.HasPrefix(string(m.Value), "{") {
			orig = notJSON
		}
		sum := sha256.Sum256(orig)
		if headerOf(m, deadletter.HeaderTruncated) != "true" || headerOf(m, deadletter.HeaderOriginalSize) != strconv.Itoa(len(orig)) ||
			headerOf(m, deadletter.HeaderOriginalSHA256) != hex.EncodeToString(sum[:]) || !strings.HasPrefix(string(orig), string(m.Value)) {
			t.Errorf("dead letter of a %d-byte value: %d bytes, headers %v", len(orig), len(m.Value), m.Headers)
		}
		if headerOf(m, deadletter.HeaderReason) == "" {
			t.Error("dead letter without a reason")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "dead-letter topic ready") || !strings.Contains(logs.String(), "max_message_bytes=1048588") {
		t.Errorf("start-up did not say what it learned of the dead-letter topic:\n%s", logs)
	}
}

// saslEnv is an env whose worker connects through the broker's SASL
// listener, as a user the test can deny a topic with an ACL.
func saslEnv(t *testing.T) (e *env, saslArgs []string, acl func(op kafka.ACLOperationType, topic string, add bool)) {
	t.Helper()
	saslBrokers := os.Getenv("TESTENV_SASL_BROKERS")
	if saslBrokers == "" {
		t.Skip("needs the SASL listener and authorizer of scripts/services.sh (make test starts them)")
	}
	user := os.Getenv("TESTENV_SASL_USERNAME")
	e = newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	e.workerBrokers = []string{saslBrokers}
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	admin := &kafka.Client{Addr: kafka.TCP(e.brokers...), Transport: tr, Timeout: 10 * time.Second}
	acl = func(op kafka.ACLOperationType, topic string, add bool) {
		t.Helper()
		var err error
		if add {
			var res *kafka.CreateACLsResponse
			res, err = admin.CreateACLs(context.Background(), &kafka.CreateACLsRequest{ACLs: []kafka.ACLEntry{{
				ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ResourcePatternType: kafka.PatternTypeLiteral,
				Principal: "User:" + user, Host: "*", Operation: op, PermissionType: kafka.ACLPermissionTypeDeny}}})
			if err == nil && len(res.Errors) > 0 {
				err = res.Errors[0]
			}
		} else {
			_, err = admin.DeleteACLs(context.Background(), &kafka.DeleteACLsRequest{Filters: []kafka.DeleteACLsFilter{{
				ResourceTypeFilter: kafka.ResourceTypeTopic, ResourceNameFilter: topic, ResourcePatternTypeFilter: kafka.PatternTypeLiteral,
				PrincipalFilter: "User:" + user, HostFilter: "*", Operation: op, PermissionType: kafka.ACLPermissionTypeDeny}}})
		}
		if err != nil {
			t.Fatalf("ACL %v on %s (add %t): %v", op, topic, add, err)
		}
	}
	saslArgs = []string{"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", user, "--kafka-sasl-password", os.Getenv("TESTENV_SASL_PASSWORD")}
	return e, saslArgs, acl
}

// A dead-letter topic that cannot take dead letters, for a reason time does
// not heal: said at start-up, /readyz 503 naming the fix, the bad event's
// offset and every later one of its partition uncommitted (nothing lost),
// good events still written, and all of it resolved once the operator acts.
func TestDeadLetterTopicPermanentFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		op     kafka.ACLOperationType
		create bool // the test creates the topic before the worker starts
		said   string
		fix    func(t *testing.T, acl func(kafka.ACLOperationType, string, bool), plaintext []string, topic string)
	}{
		{"not writable", kafka.ACLOperationTypeWrite, true, "is not writable by this worker",
			func(_ *testing.T, acl func(kafka.ACLOperationType, string, bool), _ []string, topic string) {
				acl(kafka.ACLOperationTypeWrite, topic, false)
			}},
		{"missing and not creatable", kafka.ACLOperationTypeCreate, false, "does not exist and could not be created",
			func(t *testing.T, _ func(kafka.ACLOperationType, string, bool), plaintext []string, topic string) {
				testenv.CreateTopic(t, plaintext, topic, 1)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, saslArgs, acl := saslEnv(t)
			plaintext := e.brokers
			dlq := testenv.Name("dead")
			if tc.create {
				testenv.CreateTopic(t, plaintext, dlq, 1)
			}
			acl(tc.op, dlq, true)
			t.Cleanup(func() { acl(tc.op, dlq, false) })
			stop, logs := e.startWorker(t, append(saslArgs, "--dlq-topic", dlq)...)
			base := adminURL(t, logs)
			testenv.Produce(t, plaintext, e.topic, click{EventID: "p-1", TenantID: "acme", UserID: "u"}.bytes())
			testenv.Produce(t, plaintext, e.topic, []byte("not json"))
			testenv.Produce(t, plaintext, e.topic, click{EventID: "p-2", TenantID: "acme", UserID: "u"}.bytes())
			e.waitRows(t, 2, 30*time.Second)
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				code, body := testenv.MustGet(t, base+"/readyz")
				return code == 503 && strings.Contains(body, "dead-letter: not ready") && strings.Contains(body, tc.said), fmt.Sprintf("/readyz %d: %s", code, body)
			})
			if !strings.Contains(logs.String(), tc.said) {
				t.Errorf("start-up did not say the dead-letter topic %s", tc.said)
			}
			time.Sleep(2 * time.Second) // commits every 100ms: long enough to commit what they may
			committed, end := testenv.Offsets(t, plaintext, e.group, e.topic, partitions)
			behind := 0
			for p := range end {
				if committed[p] < end[p] && end[p] > 0 {
					behind++
				}
			}
			if behind != 1 {
				t.Fatalf("committed %v, end %v: the bad event's partition must wait, the others not", committed, end)
			}
			tc.fix(t, acl, plaintext, dlq)
			e.waitCommitted(t, 60*time.Second)
			if dead := testenv.ReadAll(t, plaintext, dlq, 1, 20*time.Second); len(dead) != 1 {
				t.Errorf("%d dead letters after the fix, want 1", len(dead))
			}
			testenv.Eventually(t, 30*time.Second, func() (bool, string) {
				code, body := testenv.MustGet(t, base+"/readyz")
				return code == 200, fmt.Sprintf("/readyz %d after the fix: %s", code, body)
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
