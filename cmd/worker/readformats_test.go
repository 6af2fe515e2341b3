package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/event"
	"github.com/cellttl/cellttl/reader"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/schema/registry"
	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/tenants"
)

// Events the worker stored as produced (framing and schema id included)
// come back decoded through the registry, by worker read and by the
// reader package; a stored value whose schema id the registry does not
// know, or whose bytes do not decode, is given in base64 with why; the
// registry unreachable is an error naming it; without the registry flags
// worker read prints the value as stored, as before. The values are
// encoded by the test (Avro and Protobuf by hand, not by the decoder's
// libraries), framed as Confluent's serializers frame them (Apicurio's Protobuf serializer
// writes a reference of its own where Confluent's writes the message
// indexes: the worker cannot read its values), under schemas registered
// through the registry's Confluent-compatible API.
func TestReadDecodesThroughTheRegistry(t *testing.T) {
	t.Parallel()
	ccompat, _ := registryEnv(t)
	for _, format := range []string{"avro", "protobuf", "json-schema"} {
		t.Run(format, func(t *testing.T) {
			e := newEnv(t, tenantsYAML)
			if out, err := e.cmd(t, "setup"); err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			at := time.Now().Add(-5 * time.Minute).Truncate(time.Millisecond)
			stop, _ := e.startWorker(t, "--value-format", format, "--schema-registry-url", ccompat)
			goProduce(t, format, e, ccompat, 3, "r", at)
			rows := e.waitRows(t, 3, 60*time.Second)
			if err := stop(); err != nil {
				t.Fatalf("worker: %v", err)
			}
			stored := cellsOf(rows[rowkey.Key("acme", "u-0", "r-0", at.UnixMilli())])["event"]
			if len(stored) != 1 || len(stored[0].Value) < 6 || stored[0].Value[0] != 0 {
				t.Fatalf("the stored event cell of r-0: %v, want the framed value as produced", stored)
			}
			good := stored[0].Value
			// Beside them, two values no schema decodes.
			bad := map[string][]byte{
				"unknown": append([]byte{0, 0x7f, 0xff, 0xff, 0xf0}, good[5:]...),
				"garbled": append(append([]byte{}, good[:5]...), 0x7f, 0x01),
			}
			cfg, err := tenants.Load(e.tenantsFile)
			if err != nil {
				t.Fatal(err)
			}
			w, err := sink.NewWriter(e.dc, sink.Target{Table: e.table, Family: "c"}, sink.DefaultWriterConfig(), nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			var extra []sink.Row
			for id, v := range bad {
				extra = append(extra, sink.Row{Key: rowkey.Key("acme", "u-bad", id, at.UnixMilli()), Timestamp: cfg.Policy.Cell("acme", at).Timestamp, Value: v})
			}
			if _, err := w.Write(context.Background(), extra); err != nil {
				t.Fatal(err)
			}

			registryFlags := []string{"--value-format", format, "--schema-registry-url", ccompat}
			out, err := e.cmd(t, "read", append([]string{"--tenant", "acme", "--format", "json"}, registryFlags...)...)
			if err != nil {
				t.Fatalf("read: %v\n%s", err, out)
			}
			got := readJSON(t, out)
			for i := range 3 {
				id := fmt.Sprint("r-", i)
				checkDecoded(t, id, got[id].Value, fmt.Sprint("u-", i%3), fmt.Sprint("/p/", i), at)
			}
			for id, v := range bad {
				class := map[string]string{"unknown": "unknown_schema: ", "garbled": "undecodable: "}[id]
				if je := got[id]; je.ValueBase64 != base64.StdEncoding.EncodeToString(v) || !strings.HasPrefix(je.ValueError, class) || je.Value != nil {
					t.Errorf("%s: value_base64 %q value_error %q value %s, want the value in base64 and %q", id, je.ValueBase64, je.ValueError, je.Value, class)
				}
			}
			text, err := e.cmd(t, "read", append([]string{"--tenant", "acme"}, registryFlags...)...)
			if err != nil || !strings.Contains(text, `"page":"/p/1"`) || !strings.Contains(text, "base64:"+base64.StdEncoding.EncodeToString(bad["unknown"])+" (not decoded: unknown_schema: ") {
				t.Errorf("read as text: %v\n%s", err, text)
			}

			// The reader package, given the registry, decodes the same.
			schemas, err := registry.New(registry.Config{Format: format, URL: ccompat, CacheSize: 10, Timeout: 10 * time.Second}, nil, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer schemas.Close()
			r := reader.New(e.dc.Open(e.table), "c", cfg.Policy).DecodeValues(schemas)
			n := 0
			err = r.Read(context.Background(), reader.Query{Tenant: "acme"}, func(ev reader.Event) bool {
				n++
				switch {
				case strings.HasPrefix(ev.EventID, "r-"):
					i := ev.EventID[2:]
					checkDecoded(t, ev.EventID, ev.Decoded, map[string]string{"0": "u-0", "1": "u-1", "2": "u-2"}[i], "/p/"+i, at)
				case ev.DecodeError == nil || ev.Decoded != nil || !bytes.Equal(ev.Value, bad[ev.EventID]):
					t.Errorf("reader: %s decoded %s, error %v, want the stored value and why", ev.EventID, ev.Decoded, ev.DecodeError)
				case ev.DecodeError.Class != map[string]event.Class{"unknown": event.UnknownSchema, "garbled": event.Undecodable}[ev.EventID]:
					t.Errorf("reader: %s: %s, want another class", ev.EventID, ev.DecodeError.Class)
				}
				return true
			})
			if err != nil || n != 5 {
				t.Fatalf("reader: %d events, %v; want 5", n, err)
			}

			// Without the registry flags, the value as stored.
			out, err = e.cmd(t, "read", "--tenant", "acme", "--user", "u-0", "--format", "json")
			// (JSON Schema's stored value is not JSON as a whole, for its framing.)
			if je := readJSON(t, out)["r-0"]; err != nil || je.RawValue == "" || !strings.Contains(je.RawValue, "/p/0") || je.Value != nil || je.ValueError != "" {
				t.Errorf("read without the registry: %v\n%s", err, out)
			}

			// The registry unreachable: an error naming it, no output.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			dead := "http://" + l.Addr().String() + "/apis/ccompat/v7"
			l.Close()
			var stdout, stderr bytes.Buffer
			err = run(context.Background(), e.args("read", "--tenant", "acme", "--value-format", format, "--schema-registry-url", dead, "--schema-registry-timeout", "2s"), &stdout, &stderr)
			if code := exitCode(err, &stderr); code != 1 || !strings.Contains(stderr.String(), "the schema registry "+dead) || !strings.Contains(stderr.String(), "connection refused") {
				t.Errorf("read with the registry unreachable: exit %d\n%s", code, stderr.String())
			}
		})
	}
}

// readJSON reads worker read --format json's lines, by event id.
func readJSON(t *testing.T, out string) map[string]jsonEvent {
	t.Helper()
	got := map[string]jsonEvent{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var je jsonEvent
		if err := json.Unmarshal([]byte(line), &je); err != nil {
			t.Fatalf("read: %q is no JSON event: %v\n%s", line, err, out)
		}
		got[je.EventID] = je
	}
	return got
}

// checkDecoded checks a value decoded into JSON against what the producer
// wrote (goProduce).
func checkDecoded(t *testing.T, id string, doc json.RawMessage, user, page string, at time.Time) {
	t.Helper()
	var v struct {
		EventID    string `json:"event_id"`
		TenantID   string `json:"tenant_id"`
		UserID     string `json:"user_id"`
		OccurredAt string `json:"occurred_at"`
		Page       string `json:"page"`
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Errorf("%s: value %s is no JSON object: %v", id, doc, err)
		return
	}
	when, err := time.Parse(time.RFC3339Nano, v.OccurredAt)
	if v.EventID != id || v.TenantID != "acme" || v.UserID != user || v.Page != page || err != nil || !when.Equal(at) {
		t.Errorf("%s: decoded %s, want event_id %s, user_id %s, page %s, occurred_at %s", id, doc, id, user, page, at.UTC().Format(time.RFC3339Nano))
	}
}
