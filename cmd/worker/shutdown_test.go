package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// TestStopLeavesNoKafkaConnections: a worker stopped while its background
// checks run leaves none of kafka-go's connection goroutines behind. A
// check that ran after its client's transport was closed opened a new
// connection pool that nothing closes: a worker run again in one process
// (the tests, the demo) kept one more pool each time.
func TestStopLeavesNoKafkaConnections(t *testing.T) {
	e := newEnv(t, "default_ttl: 1h\ntenants:\n  acme: 1h\n")
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	for range 5 {
		stop, logs := e.startWorker(t, "--dlq-check-interval", "1ms")
		testenv.Eventually(t, 30*time.Second, func() (bool, string) {
			return strings.Contains(logs.String(), "worker started"), "not started yet:\n" + logs.String()
		})
		time.Sleep(500 * time.Millisecond)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		n := strings.Count(stacks, "kafka-go.(*connPool).discover")
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d kafka-go connection pools left running after the workers stopped", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
