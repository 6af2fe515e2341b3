package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/internal/testenv"
)

// Events of Confluent's own Python client and serializers, with their
// defaults (the schema auto-registered under the topic's subject), land
// with the contract's cells in every format, through worker run: Avro with
// a union with null and timestamp-millis, and with a reference to a record
// of another subject; JSON Schema with Python's RFC 3339 (microseconds,
// +00:00); Protobuf whose schema the serializer registers as a base64
// FileDescriptorProto, Click the file's second message ([1]) with a
// Timestamp finer than a millisecond, and with an import of another file
// registered under a subject of its own. Each Protobuf event was an
// invalid_schema letter (syntax error: unexpected identifier) while the
// worker read .proto text only.
func TestConfluentPythonSerializers(t *testing.T) {
	t.Parallel()
	registryEnv(t)
	python := os.Getenv("TESTENV_CONFLUENT_PYTHON")
	if python == "" {
		t.Fatal("TESTENV_CONFLUENT_PYTHON is not set: scripts/services.sh installs Confluent's Python client beside the registry")
	}
	for _, tc := range []struct{ mode, format string }{
		{"avro", "avro"},
		{"avro-refs", "avro"},
		{"json", "json-schema"},
		{"protobuf", "protobuf"},
		{"protobuf-refs", "protobuf"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			f := startFormatTest(t, tc.format)
			at := time.Now().Add(-5 * time.Minute).Truncate(time.Second).Add(123456789 * time.Nanosecond)
			const n = 6
			cmd := exec.Command(python, "testdata/confluent_producer.py", tc.mode, strings.Join(f.brokers, ","), f.topic, f.ccompat, fmt.Sprint(n), "py", fmt.Sprint(at.UnixNano()))
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
			f.expectLanded(t, n, at, "py")
			if tc.format == "protobuf" {
				for _, m := range testenv.ReadAll(t, f.brokers, f.topic, n, 10*time.Second) {
					if !bytes.Equal(m.Value[5:7], []byte{2, 2}) {
						t.Fatalf("value % x, want Click's index [1] after the schema id", m.Value[:min(len(m.Value), 8)])
					}
				}
			}
			if err := f.stop(); err != nil {
				t.Fatalf("worker: %v", err)
			}
		})
	}
}
