package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// An Avro load run end to end, on the embedded services and registry:
// every valid event framed with the registered id is in Bigtable with its
// contract timestamp, and every bad one (cut short, not framed, of an
// unknown id, not Avro) is in the dead-letter topic, which the
// verification checks event by event.
func TestEmbeddedAvroRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and runs it: not in -short")
	}
	// The run reads tenants.yaml, at the repository's root.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(".."); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })
	var out bytes.Buffer
	err = run(t.Context(), []string{"--embedded", "--value-format", "avro", "--count", "4000", "--malformed", "0.05", "--rate", "4000",
		"--report-dir", t.TempDir(), "--seed", "7"}, &out)
	if err != nil {
		t.Fatalf("avro load run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "verification PASS") || strings.Contains(out.String(), " 0 invalid") {
		t.Errorf("want a passing verification with invalid events among them:\n%s", out.String())
	}
}
