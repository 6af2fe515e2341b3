package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/deadletter"
	"github.com/cellttl/cellttl/internal/bounded"
	"github.com/cellttl/cellttl/testkit/lab"
	"github.com/cellttl/cellttl/testkit/testenv"
)

const hostileClick = `{"type":"record","name":"Click","fields":[{"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
 {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}}]}`

// hostileRegistry answers schema 1 well, and each other id as a hostile
// registry would: 2 an endless answer, 3 a schema of 1.4 MB a compiler
// quotes whole in its refusal, 4 a schema nesting 100,000 levels, 5
// references of 5 MB each; 6 and 7 Protobuf schemas of 100,000 nested
// messages and of an option literal nested 30,000 deep (5 GB and 8.6 s of
// CPU in the compiler, unbounded).
func hostileRegistry(t *testing.T) string {
	t.Helper()
	deep := strings.Repeat(`{"type":"array","items":`, 100_000) + `"string"` + strings.Repeat("}", 100_000)
	refs := make([]map[string]any, 100)
	for i := range refs {
		refs[i] = map[string]any{"name": fmt.Sprintf("r%d", i), "subject": "big", "version": i + 1}
	}
	big := `{"type":"enum","name":"Big","symbols":["A"],"doc":"` + strings.Repeat("d", 5<<20) + `"}`
	var b strings.Builder
	b.WriteString(`syntax = "proto3"; `)
	for i := range 100_000 {
		fmt.Fprintf(&b, "message M%d { ", i)
	}
	nestedMessages := b.String() + strings.Repeat("} ", 100_000) // 1.8 MB
	nestedOption := `syntax = "proto3"; import "google/protobuf/descriptor.proto";
extend google.protobuf.MessageOptions { O o = 50000; } message O { O a = 1; }
message Click { option (o) = ` + strings.Repeat("{ a: ", 30_000) + strings.Repeat("}", 30_000) + `; string event_id = 1; }` // 195 KiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		answer := func(v any) { _ = json.NewEncoder(w).Encode(v) }
		switch {
		case r.URL.Path == "/config":
			answer(map[string]any{"compatibilityLevel": "BACKWARD"})
		case r.URL.Path == "/schemas/ids/1":
			answer(map[string]any{"schema": hostileClick})
		case r.URL.Path == "/schemas/ids/2":
			chunk := []byte(strings.Repeat(" ", 64<<10))
			for range 8 << 10 { // 512 MiB, if it were read
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case r.URL.Path == "/schemas/ids/3":
			answer(map[string]any{"schema": `{"type":"record","name":"X","fields":[` + strings.Repeat(`{"name":"f","type":"nope"},`, 50_000) + `]}`})
		case r.URL.Path == "/schemas/ids/4":
			answer(map[string]any{"schema": deep})
		case r.URL.Path == "/schemas/ids/5":
			answer(map[string]any{"schema": hostileClick, "references": refs})
		case r.URL.Path == "/schemas/ids/6":
			answer(map[string]any{"schemaType": "PROTOBUF", "schema": nestedMessages})
		case r.URL.Path == "/schemas/ids/7":
			answer(map[string]any{"schemaType": "PROTOBUF", "schema": nestedOption})
		case strings.HasPrefix(r.URL.Path, "/subjects/big/versions/"):
			answer(map[string]any{"subject": "big", "version": 1, "id": 99, "schema": big})
		default:
			w.WriteHeader(http.StatusNotFound)
			answer(map[string]any{"error_code": 40403, "message": "not found"})
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A registry that misbehaves in every way tried (an endless answer, a
// schema of megabytes a compiler quotes whole, nesting a compiler recurses
// on, references of megabytes; for Protobuf, 100,000 nested messages and an
// option literal nested 30,000 deep) costs each of its schema's values one
// letter with a short reason, invalid_schema, while the good values are
// written, every offset is committed, and the worker stays within its
// memory bound. The reason of 1.4 MB made a letter the broker refused, for
// good; the answers took the worker to gigabytes. Against the real broker
// and emulator, the worker a process.
func TestHostileRegistry(t *testing.T) {
	t.Parallel()
	url := hostileRegistry(t)
	t.Run("avro", func(t *testing.T) {
		t.Parallel()
		at := time.Now().Truncate(time.Millisecond)
		value := func(id uint32, event string) []byte {
			b, err := avro.Marshal(avro.MustParse(hostileClick), map[string]any{"event_id": event, "tenant_id": "globex", "occurred_at": at})
			if err != nil {
				t.Fatal(err)
			}
			return append(binary.BigEndian.AppendUint32([]byte{0}, id), b...)
		}
		runHostile(t, url, "avro", []uint32{1, 2, 3, 4, 5}, value, 2)
	})
	t.Run("protobuf", func(t *testing.T) {
		t.Parallel()
		value := func(id uint32, _ string) []byte { return append(binary.BigEndian.AppendUint32([]byte{0}, id), 0) }
		runHostile(t, url, "protobuf", []uint32{6, 7}, value, 0)
	})
}

// runHostile produces two values of each id with value, runs a worker of
// format against the registry at url, and checks that every value but
// the rows wanted is an invalid_schema letter with a short reason, within
// the memory bound and with short log lines.
func runHostile(t *testing.T, url, format string, ids []uint32, value func(id uint32, event string) []byte, rows int) {
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	var msgs []kafka.Message
	for _, id := range ids {
		for i := range 2 {
			msgs = append(msgs, kafka.Message{Value: value(id, fmt.Sprintf("s%d-%d", id, i))})
		}
	}
	testenv.ProduceMessages(t, e.brokers, e.topic, msgs...)

	logs := &syncBuffer{}
	p, err := lab.Start(lab.Options{Bin: testenv.WorkerBinary(t), Log: logs, Args: e.args("run", "--value-format", format, "--schema-registry-url", url,
		"--max-inflight-bytes", "16777216", "--log-format", "text")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(20 * time.Second)
		if t.Failed() {
			t.Logf("worker:\n%.20000s", logs.String())
		}
	})
	e.waitCommitted(t, 90*time.Second)
	_, peak, _, err := lab.Memory(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	// The bound (16 MiB) plus what docs/design.md sizes a pod with beside it.
	t.Logf("peak RSS %.1f MiB", float64(peak)/(1<<20))
	if limit := int64(16+80) << 20; peak > limit {
		t.Errorf("peak RSS %d MiB, past the bound + 80 MiB", peak>>20)
	}
	if got := e.rows(t); len(got) != rows {
		t.Errorf("%d rows, want %d", len(got), rows)
	}
	want := len(msgs) - rows
	letters := testenv.ReadAll(t, e.brokers, e.topic+".dlq", want, 30*time.Second)
	if len(letters) != want {
		t.Errorf("%d letters, want %d", len(letters), want)
	}
	for _, l := range letters {
		if c, r := letterHeader(l, deadletter.HeaderReasonClass), letterHeader(l, deadletter.HeaderReason); c != "invalid_schema" || len(r) > bounded.Reason {
			t.Errorf("a letter of class %q with a reason of %d bytes", c, len(r))
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 4*bounded.Answer {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
	if err := p.Stop(20 * time.Second); err != nil {
		t.Errorf("worker: %v", err)
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
