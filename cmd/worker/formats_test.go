package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/testenv"
	"github.com/cellttl/cellttl/rowkey"
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

// javaProduce runs testdata/RegistryProducer.java: Apicurio's serializers
// register the schema and write the events, Apache Kafka's producer sends
// them.
func javaProduce(t *testing.T, serdes, format string, e *env, ccompat string, version, count int, prefix string, at time.Time) {
	t.Helper()
	v2 := strings.TrimSuffix(ccompat, "/ccompat/v7") + "/registry/v2"
	cmd := exec.Command("java", "-cp", serdes+"/*", "testdata/RegistryProducer.java", format, strings.Join(e.brokers, ","), e.topic, v2,
		fmt.Sprint(version), fmt.Sprint(count), prefix, fmt.Sprint(at.UnixMilli()))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("RegistryProducer: %v\n%s", err, out)
	}
}

// flakyRegistry stands between the worker and the registry; down makes
// it answer 503, as a registry behind a load balancer with no backend.
func flakyRegistry(t *testing.T, ccompat string) (string, *atomic.Bool) {
	t.Helper()
	target, err := url.Parse(ccompat)
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "no backend", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + target.Path, &down
}

// Avro events written by Apicurio's own serializer land with the
// contract's cells; the schema evolves mid-partition; the registry going
// away holds the worker (nothing dead-lettered, /readyz 503) until it is
// back; values without the framing, of an unknown id or not decoding
// with their schema are dead-lettered with their classes.
func TestAvroThroughTheRegistry(t *testing.T) {
	ccompat, serdes := registryEnv(t)
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	at := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond)
	proxied, down := flakyRegistry(t, ccompat)
	stop, logs := e.startWorker(t, "--value-format", "avro", "--schema-registry-url", proxied)
	base := adminURL(t, logs)

	javaProduce(t, serdes, "avro", e, ccompat, 1, 4, "v1", at)
	e.waitRows(t, 4, 60*time.Second)

	// The registry goes away; the producer registers a new version of the
	// schema (a field added) and writes with it, to the same partition.
	down.Store(true)
	javaProduce(t, serdes, "avro", e, ccompat, 2, 4, "v2", at)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "schema registry"), fmt.Sprintf("/readyz %d: %s", code, body)
	})
	time.Sleep(2 * time.Second)
	if rows := e.rows(t); len(rows) != 4 {
		t.Fatalf("%d rows while the registry was down, want the 4 written before", len(rows))
	}
	if dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", 1, 3*time.Second); len(dead) != 0 {
		t.Fatalf("a dead letter while the registry was down (%s: %s), want none", headerOf(dead[0], deadletter.HeaderReasonClass), headerOf(dead[0], deadletter.HeaderReason))
	}
	down.Store(false)
	rows := e.waitRows(t, 8, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		code, body := testenv.MustGet(t, base+"/readyz")
		return code == http.StatusOK, fmt.Sprintf("/readyz %d: %s", code, body)
	})

	for _, prefix := range []string{"v1", "v2"} {
		for i := range 4 {
			key := rowkey.Key("acme", fmt.Sprint("u-", i%3), fmt.Sprintf("%s-%d", prefix, i), at.UnixMilli())
			cells := cellsOf(rows[key])
			if len(cells["event"]) != 1 {
				t.Errorf("row %q: %d event cells, want 1 (rows: %v)", key, len(cells["event"]), keysOf(rows))
				continue
			}
			c := cells["event"][0]
			if want := wantTimestamp("acme", at); int64(c.Timestamp) != want || len(c.Value) < 5 || c.Value[0] != 0 {
				t.Errorf("row %q: timestamp %d value % x, want %d and the framed value as produced", key, c.Timestamp, c.Value, want)
			}
		}
	}

	// Bad values, each with its class.
	good := testenv.ReadAll(t, e.brokers, e.topic, 1, 10*time.Second)[0].Value
	garbled := append(append([]byte{}, good[:5]...), 0x7f, 0x01)
	unknown := append([]byte{0, 0x7f, 0xff, 0xff, 0xf0}, good[5:]...)
	bad := []struct {
		value []byte
		class string
	}{
		{[]byte(`{"event_id":"j-1","tenant_id":"acme"}`), "not_framed"},
		{unknown, "unknown_schema"},
		{garbled, "undecodable"},
	}
	var msgs []kafka.Message
	for _, b := range bad {
		msgs = append(msgs, kafka.Message{Value: b.value})
	}
	testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)
	dead := testenv.ReadAll(t, e.brokers, e.topic+".dlq", len(bad), 30*time.Second)
	for _, b := range bad {
		found := false
		for _, d := range dead {
			if bytes.Equal(d.Value, b.value) {
				found = true
				if c := headerOf(d, deadletter.HeaderReasonClass); c != b.class {
					t.Errorf("dead letter of % x: class %q, want %q (%s)", b.value, c, b.class, headerOf(d, deadletter.HeaderReason))
				}
			}
		}
		if !found {
			t.Errorf("no dead letter of % x", b.value)
		}
	}
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}
