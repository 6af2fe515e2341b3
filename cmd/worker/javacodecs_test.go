package main

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Kafka's Java producer, outside transactions, with each codec in batches
// of up to 256 KiB, each record with headers: every event lands once,
// nothing is dead-lettered, every offset is committed.
func TestJavaProducerCodecs(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the record batches of that version's Java producer")
	t.Parallel()
	lib := javaLib(t)
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	const n = 2000
	stop, _ := e.startWorker(t)
	e.runJava(t, lib, "codecs", n)
	e.waitRows(t, 4*n, 90*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	expectRows(t, e.rowsPerEvent(t), n, "gzip", "snappy", "lz4", "zstd")
	e.expectNoDeadLetters(t)
}
