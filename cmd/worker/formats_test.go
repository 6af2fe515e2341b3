package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// registryEnv is the schema registry of scripts/services.sh and the
// classpath of Apicurio's Java serializers.
func registryEnv(t *testing.T) (ccompat, serdes string) {
	t.Helper()
	ccompat, serdes = os.Getenv("TESTENV_SCHEMA_REGISTRY_URL"), os.Getenv("TESTENV_SERDES_LIB")
	if ccompat == "" || serdes == "" || !testenv.Real() {
		t.Skip("TESTENV_SCHEMA_REGISTRY_URL, TESTENV_SERDES_LIB and the real Kafka are not set: scripts/services.sh starts Apicurio Registry and fetches its serializers (make test does)")
	}
	return ccompat, serdes
}

// formatTest is a worker reading one --value-format through the registry,
// behind flakyRegistry, from a topic testdata/RegistryProducer.java
// writes.
type formatTest struct {
	*env
	format, ccompat, serdes string
	base                    string       // the worker's admin endpoint
	down                    *atomic.Bool // the registry answers 503
	stop                    func() error // stops the worker
	produced                int          // events RegistryProducer wrote
}

// startFormatTest sets up a table and topic and starts the worker with
// --value-format format and the mapping flags.
func startFormatTest(t *testing.T, format string, flags ...string) *formatTest {
	t.Helper()
	return startFormatTestWith(t, tenantsYAML, format, flags...)
}

// startFormatTestWith is startFormatTest with the tenants file yaml.
func startFormatTestWith(t *testing.T, yaml, format string, flags ...string) *formatTest {
	t.Helper()
	ccompat, serdes := registryEnv(t)
	e := newEnv(t, yaml)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range testenv.ReadAll(t, e.brokers, e.topic+".dlq", 20, 3*time.Second) {
				t.Logf("dead letter % x...: %s: %s", d.Value[:min(len(d.Value), 12)], headerOf(d, deadletter.HeaderReasonClass), headerOf(d, deadletter.HeaderReason))
			}
		}
	})
	proxied, down := flakyRegistry(t, ccompat)
	stop, logs := e.startWorker(t, append([]string{"--value-format", format, "--schema-registry-url", proxied}, flags...)...)
	return &formatTest{env: e, format: format, ccompat: ccompat, serdes: serdes, base: adminURL(t, logs), down: down, stop: stop}
}

// produce runs RegistryProducer.java: count events prefix-0.. written with
// version of its schema, at the time at. It talks to the registry
// directly, never through the flaky proxy.
func (f *formatTest) produce(t *testing.T, version, count int, prefix string, at time.Time) {
	t.Helper()
	f.runProducer(t, f.format, f.topic, version, count, prefix, at)
	f.produced += count
}

// runProducer runs RegistryProducer.java in mode, to topic.
func (f *formatTest) runProducer(t *testing.T, mode, topic string, version, count int, prefix string, at time.Time) {
	t.Helper()
	apis := strings.TrimSuffix(f.ccompat, "/ccompat/v7")
	ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", "-cp", f.serdes+"/*", "testdata/RegistryProducer.java", mode, strings.Join(f.brokers, ","), topic, apis,
		fmt.Sprint(version), fmt.Sprint(count), prefix, fmt.Sprint(at.UnixNano()))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("RegistryProducer %s: %v\n%s", mode, err, out)
	}
}

// produceWhileDown takes the registry away, produces with version of the
// schema (new to the worker), and checks that the worker holds: /readyz
// 503 naming the registry, no row beyond those before, no dead letter.
// Then the registry is back: every event lands and /readyz is 200.
func (f *formatTest) produceWhileDown(t *testing.T, version, count int, prefix string, at time.Time) {
	t.Helper()
	before := len(f.rows(t))
	f.down.Store(true)
	f.produce(t, version, count, prefix, at)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, f.base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "schema registry"), fmt.Sprintf("/readyz %d: %s", code, body)
	})
	time.Sleep(2 * time.Second) // what a worker that went on would have written by now
	if rows := f.rows(t); len(rows) != before {
		t.Fatalf("%d rows while the registry was down, want the %d written before", len(rows), before)
	}
	if dead := testenv.ReadAll(t, f.brokers, f.topic+".dlq", 1, 3*time.Second); len(dead) != 0 {
		t.Fatalf("a dead letter while the registry was down (%s: %s), want none", headerOf(dead[0], deadletter.HeaderReasonClass), headerOf(dead[0], deadletter.HeaderReason))
	}
	f.down.Store(false)
	f.waitRows(t, before+count, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, f.base+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("/readyz %d: %s", code, body)
	})
}

// expectLanded waits for the row of each event prefix-0 .. prefix-(n-1)
// of every prefix, all at, and checks the contract's cells: the row key
// of the event's tenant and user as RegistryProducer gives them (acme for
// even events, globex for odd, user u-(i%3)), an event cell holding the
// value exactly as produced (framing and schema id included) and a
// written_at cell, both at the tenant's timestamp.
func (f *formatTest) expectLanded(t *testing.T, n int, at time.Time, prefixes ...string) {
	t.Helper()
	rows := f.waitRows(t, n*len(prefixes), 60*time.Second)
	produced := map[string]bool{}
	for _, m := range testenv.ReadAll(t, f.brokers, f.topic, f.produced, 10*time.Second) {
		produced[string(m.Value)] = true
	}
	for _, prefix := range prefixes {
		for i := range n {
			tenant := map[bool]string{true: "acme", false: "globex"}[i%2 == 0]
			key := rowkey.Key(tenant, fmt.Sprint("u-", i%3), fmt.Sprintf("%s-%d", prefix, i), at.UnixMilli())
			cells := cellsOf(rows[key])
			if len(cells["event"]) != 1 || len(cells["written_at"]) != 1 {
				t.Errorf("row %q: %d event and %d written_at cells, want 1 each (rows: %v)", key, len(cells["event"]), len(cells["written_at"]), keysOf(rows))
				continue
			}
			want := wantTimestamp(tenant, at)
			if c := cells["event"][0]; int64(c.Timestamp) != want || !produced[string(c.Value)] || c.Value[0] != 0 {
				t.Errorf("row %q: event cell at %d holding % x, want %d and the framed value as produced", key, c.Timestamp, c.Value, want)
			}
			if c := cells["written_at"][0]; int64(c.Timestamp) != want {
				t.Errorf("row %q: written_at cell at %d, want %d", key, c.Timestamp, want)
			}
		}
	}
	if len(rows) != n*len(prefixes) {
		t.Errorf("%d rows, want %d: %v", len(rows), n*len(prefixes), keysOf(rows))
	}
}

// expectSchemaIDs checks that the topic's values are framed with the ids
// the registry's Confluent-compatible API gives the subject's versions:
// perVersion values of version 1, then perVersion of version 2. It
// returns the values.
func (f *formatTest) expectSchemaIDs(t *testing.T, perVersion int) []kafka.Message {
	t.Helper()
	produced := testenv.ReadAll(t, f.brokers, f.topic, 2*perVersion, 10*time.Second)
	if len(produced) != 2*perVersion {
		t.Fatalf("%d values in the topic, want %d", len(produced), 2*perVersion)
	}
	for v := 1; v <= 2; v++ {
		_, body := testenv.MustGet(t, fmt.Sprintf("%s/subjects/%s-value/versions/%d", f.ccompat, f.topic, v))
		var sv struct{ ID uint32 }
		if err := json.Unmarshal([]byte(body), &sv); err != nil || sv.ID == 0 {
			t.Fatalf("subject %s-value version %d: %v %s", f.topic, v, err, body)
		}
		for _, m := range produced[(v-1)*perVersion : v*perVersion] {
			if len(m.Value) < 5 || m.Value[0] != 0 || binary.BigEndian.Uint32(m.Value[1:5]) != sv.ID {
				t.Errorf("value % x, want it framed with magic byte 0 and schema id %d (version %d)", m.Value, sv.ID, v)
			}
		}
	}
	return produced
}

// badValue is a value the worker dead-letters, with its reason's class
// and, when set, what the reason says.
type badValue struct {
	value  []byte
	class  string
	reason string
}

// expectDeadLettered produces the values and checks each is dead-lettered,
// once, with its class, and every offset committed.
func (f *formatTest) expectDeadLettered(t *testing.T, bad ...badValue) {
	t.Helper()
	var msgs []kafka.Message
	for _, b := range bad {
		msgs = append(msgs, kafka.Message{Value: b.value})
	}
	testenv.ProduceMessages(t, f.brokers, f.topic, msgs...)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		_, end := testenv.Offsets(t, f.brokers, f.group, f.topic+".dlq", 1)
		return end[0] >= int64(len(bad)), fmt.Sprintf("%d dead letters, want %d", end[0], len(bad))
	})
	f.waitCommitted(t, 30*time.Second)
	dead := testenv.ReadAll(t, f.brokers, f.topic+".dlq", len(bad)+1, 10*time.Second)
	for _, b := range bad {
		found := 0
		for _, d := range dead {
			if bytes.Equal(d.Value, b.value) {
				found++
				c, r := headerOf(d, deadletter.HeaderReasonClass), headerOf(d, deadletter.HeaderReason)
				if c != b.class || !strings.Contains(r, b.reason) {
					t.Errorf("dead letter of % x: %s: %s, want %s: ...%s...", b.value, c, r, b.class, b.reason)
				}
			}
		}
		if found != 1 {
			t.Errorf("%d dead letters of % x, want 1", found, b.value)
		}
	}
	if len(dead) != len(bad) {
		t.Errorf("%d dead letters, want %d", len(dead), len(bad))
	}
}

// unknownID is a framed value of a schema id the registry does not have.
func unknownID(payload []byte) []byte {
	return append([]byte{0, 0x7f, 0xff, 0xff, 0xf0}, payload...)
}
