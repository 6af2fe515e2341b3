package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// Every command that reads the topics ends within its --service-timeout
// when the broker takes the connection and never answers, naming the
// broker and the request; where the worker's own bound on a request was
// all it had, the exit status said nothing of a wait, and the error not
// how long.
func TestTopicCommandsEndWhenKafkaDoesNotAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	broker := silentTCP(t)
	const timeout = 2 * time.Second
	for name, extra := range map[string][]string{
		"retention": nil,
		"forget":    {"--tenant", "acme", "--user", "u-1", "--requested-by", "test"},
		"offboard":  {"--tenant", "acme", "--requested-by", "test"},
		"redrive":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append(e.args(name, "--brokers", broker, "--topic", e.topic, "--service-timeout", timeout.String()), extra...)
			code, out, took := runWorker(t, timeout, nil, args...)
			want := "waited 2s for Kafka broker " + broker + " ("
			if code != exitNoAnswer || !strings.Contains(out, want) || !strings.Contains(out, "without an answer (--service-timeout 2s)") {
				t.Fatalf("exit %d after %s, want %d and %q...; it said:\n%s", code, took.Round(time.Millisecond), exitNoAnswer, want, out)
			}
			t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), lastLine(out))
		})
	}
	// In-process too: the watch's lines and the command's share stderr,
	// and nothing of either outlives the command (TestMain's leak check).
	out, err := e.cmd(t, "retention", "--brokers", broker, "--topic", e.topic, "--service-timeout", timeout.String())
	if codeOf(err) != exitNoAnswer || !strings.Contains(err.Error(), "waited 2s for Kafka broker "+broker+" (Metadata of every topic)") {
		t.Errorf("in-process: exit %d, %v\n%s", codeOf(err), err, out)
	}
}

// stuckRegistry answers as a schema registry (its compatibility setting,
// which the worker asks first) and holds every request for a schema.
func stuckRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/config" {
			w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
			_, _ = w.Write([]byte(`{"compatibilityLevel":"BACKWARD"}`))
			return
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// framed is an Avro value framed for schema id 7, as Confluent's
// serializers frame it.
var framed = []byte{0, 0, 0, 0, 7, 2, 'x'}

// The commands that read values through the schema registry end within
// their --service-timeout when it takes the connection and never answers,
// or answers as a registry and never gives a schema: worker read, which
// tried each value for minutes, and worker redrive, which waited until the
// registry answered.
func TestRegistryCommandsEndWhenTheRegistryDoesNotAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	// A stored event, and its dead letter, framed for the registry.
	cfg, err := tenants.Load(e.tenantsFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := sink.NewWriter(e.dc, sink.Target{Table: e.table, Family: "c"}, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	if _, err := w.Write(context.Background(), []sink.Row{{Key: rowkey.Key("acme", "u-1", "r-1", at.UnixMilli()), Timestamp: cfg.Policy.Cell("acme", at).Timestamp, Value: framed}}); err != nil {
		t.Fatal(err)
	}
	testenv.ProduceMessages(t, e.brokers, e.topic+".dlq", kafka.Message{Value: framed, Headers: []kafka.Header{
		{Key: deadletter.HeaderSourceTopic, Value: []byte(e.topic)}, {Key: deadletter.HeaderSourcePartition, Value: []byte("0")},
		{Key: deadletter.HeaderSourceOffset, Value: []byte("0")}, {Key: deadletter.HeaderReasonClass, Value: []byte("unknown_schema")},
	}})
	stuck, silent := stuckRegistry(t), "http://"+silentTCP(t)
	const timeout = 2 * time.Second
	for _, c := range []struct{ name, url, what string }{
		{"read", stuck, "schema id 7"},
		{"redrive", stuck, "schema id 7"},
		{"redrive", silent, "its compatibility setting"},
	} {
		t.Run(c.name+"/"+strings.TrimPrefix(c.url, "http://"), func(t *testing.T) {
			t.Parallel()
			args := e.args(c.name, "--value-format", "avro", "--schema-registry-url", c.url, "--service-timeout", timeout.String())
			if c.name == "read" {
				args = append(args, "--tenant", "acme")
			} else {
				args = append(args, "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic)
			}
			code, out, took := runWorker(t, timeout, nil, args...)
			want := "waited 2s for the schema registry at " + c.url + " (" + c.what + ") without an answer (--service-timeout 2s)"
			if code != exitNoAnswer || !strings.Contains(out, want) {
				t.Fatalf("exit %d after %s, want %d and %q; it said:\n%s", code, took.Round(time.Millisecond), exitNoAnswer, want, out)
			}
			t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), lastLine(out))
		})
	}
}
