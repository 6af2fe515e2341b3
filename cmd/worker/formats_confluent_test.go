package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Events of Confluent's own Python client and serializers, with their
// defaults (the schema auto-registered under the topic's subject), land
// with the contract's cells in every format, through worker run: Avro with
// a union with null and timestamp-millis, and with a reference to a record
// of another subject; JSON Schema with Python's RFC 3339 (microseconds,
// +00:00); Protobuf whose schema the serializer registers as a base64
// FileDescriptorProto, Click the file's second message ([1]) with a
// Timestamp finer than a millisecond, with an import of another file
// registered under a subject of its own, and nested in another message. Each Protobuf event was an
// invalid_schema letter (syntax error: unexpected identifier) while the
// worker read .proto text only. globex is not listed at first: its events
// are dead-lettered (unlisted_tenant), and worker redrive writes them once
// it is; worker read gives acme's stored values back decoded.
func TestConfluentPythonSerializers(t *testing.T) {
	t.Parallel()
	registryEnv(t)
	python := os.Getenv("TESTENV_CONFLUENT_PYTHON")
	if python == "" {
		t.Fatal("TESTENV_CONFLUENT_PYTHON is not set: scripts/services.sh installs Confluent's Python client beside the registry")
	}
	for _, tc := range []struct {
		mode, format string
		index        []byte // Protobuf's message indexes, as framed
	}{
		{"avro", "avro", nil},
		{"avro-refs", "avro", nil},
		{"json", "json-schema", nil},
		{"protobuf", "protobuf", []byte{2, 2}},           // [1]
		{"protobuf-refs", "protobuf", []byte{2, 2}},      // [1]
		{"protobuf-nested", "protobuf", []byte{4, 2, 0}}, // [1, 0]
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			unlisted := strings.Replace(tenantsYAML, "  globex: 3d\n", "", 1) + "unlisted_tenants: dead-letter\n"
			f := startFormatTestWith(t, unlisted, tc.format)
			at := time.Now().Add(-5 * time.Minute).Truncate(time.Second).Add(123456789 * time.Nanosecond)
			const n = 6
			ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, python, "testdata/confluent_producer.py", tc.mode, strings.Join(f.brokers, ","), f.topic, f.ccompat, fmt.Sprint(n), "py", fmt.Sprint(at.UnixNano()))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("confluent_producer.py %s: %v\n%s", tc.mode, err, out)
			}
			f.produced += n
			_, body := testenv.MustGet(t, fmt.Sprintf("%s/subjects/%s-value/versions/1", f.ccompat, f.topic))
			if strings.HasSuffix(tc.mode, "-refs") && !strings.Contains(body, `"references"`) {
				t.Fatalf("the registry holds %s, want a schema with references", body)
			}
			if tc.format == "protobuf" && strings.Contains(body, "syntax") {
				t.Fatalf("the registry holds %s, want the serializer's base64 FileDescriptorProto", body)
			}
			f.waitRows(t, n/2, 60*time.Second) // acme's
			f.waitCommitted(t, 30*time.Second)
			if err := f.stop(); err != nil {
				t.Fatalf("worker: %v", err)
			}
			registry := []string{"--value-format", tc.format, "--schema-registry-url", f.ccompat}
			out, err := f.cmd(t, "read", append([]string{"--tenant", "acme", "--format", "json"}, registry...)...)
			if err != nil || !strings.Contains(out, `"py-0"`) || !strings.Contains(out, `"py-4"`) {
				t.Fatalf("read: %v, want acme's events decoded\n%s", err, out)
			}
			f.writeTenants(t, tenantsYAML)
			out, err = f.cmd(t, "redrive", append([]string{"--brokers", strings.Join(f.brokers, ","), "--topic", f.topic, "--apply", "--trust-unsigned-letters"}, registry...)...)
			if flat := strings.Join(strings.Fields(out), " "); err != nil || !strings.Contains(flat, "unlisted_tenant written 3") {
				t.Fatalf("redrive: %v, want globex's three written\n%s", err, out)
			}
			f.expectLanded(t, n, at, "py")
			if tc.index != nil {
				for _, m := range testenv.ReadAll(t, f.brokers, f.topic, n, 10*time.Second) {
					if !bytes.HasPrefix(m.Value[5:], tc.index) {
						t.Fatalf("value % x, want Click's indexes % x after the schema id", m.Value[:min(len(m.Value), 8)], tc.index)
					}
				}
			}
		})
	}
}
