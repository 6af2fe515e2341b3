package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// A Java consumer of Apache Kafka's own client joins the worker's group
// (as a second application given the same group id would, or a migration
// to another client), with the group protocol Java clients 4.x use by
// default (KIP-848's consumer) and with the classic one, while events
// arrive; it reads, never commits, and leaves. What the broker and the
// client make of the mix differs by version; the test records it and
// holds it (docs/operations.md, "Kafka versions"). What the worker must do
// holds on every broker: every event written once, none lost to the
// partitions the stranger held, every offset committed once it has left.
func TestJavaConsumerBesideTheWorkersGroup(t *testing.T) {
	testenv.BrokerVersionMatters(t, "the group protocols the broker speaks")
	t.Parallel()
	lib := javaLib(t)
	for _, protocol := range []string{"consumer", "classic"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tenantsYAML)
			if out, err := e.cmd(t, "setup"); err != nil {
				t.Fatalf("setup: %v\n%s", err, out)
			}
			stop, _ := e.startWorker(t)
			const n = 300
			produce := func(from int) {
				values := make([][]byte, 0, n)
				for i := range n {
					values = append(values, fmt.Appendf(nil, `{"event_id":"j-%d","tenant_id":"acme","user_id":"u-%d"}`, from+i, i%7))
				}
				testenv.Produce(t, e.brokers, e.topic, values...)
			}
			produce(0)
			e.waitRows(t, n, 60*time.Second)

			src, err := filepath.Abs("testdata/java/GroupConsumer.java")
			if err != nil {
				t.Fatal(err)
			}
			// The stranger polls until it fails, or for 90 s: long enough for
			// the rebalances that make it fail on a loaded machine. A life
			// shorter than those (20 s was, once) ends before the worker's
			// join comes back, and the stranger leaves having read.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "java", "-Xmx256m", "-cp", lib+"/*", src, strings.Join(e.brokers, ","), e.topic, e.group, protocol, "90")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var said []string
			lines := bufio.NewScanner(out)
			produced := false
			for lines.Scan() {
				said = append(said, lines.Text())
				if !produced && strings.HasPrefix(lines.Text(), "ASSIGNED") {
					produce(n) // while the stranger holds partitions
					produced = true
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("GroupConsumer.java: %v\n%s", err, stderr.String())
			}
			if !produced {
				produce(n)
			}
			t.Logf("Kafka %s, a Java consumer of group.protocol=%s in the worker's group: %s", os.Getenv("TESTENV_KAFKA_VERSION"), protocol, strings.Join(said, "; "))
			// kafka-go's member metadata says version 1 of the consumer
			// protocol in version 0's layout: a Java leader, and Kafka 4's
			// upgrade of the group to the consumer protocol, refuse it as
			// malformed (Kafka 3.9 has no consumer protocol by default).
			// A worker leader cannot read the Java member's newer layout
			// either; it joins again, and the Java member, leader of the
			// next generation, fails. The stranger never holds partitions
			// for good.
			all := strings.Join(said, "\n")
			switch {
			case protocol == "consumer" && (!strings.Contains(all, "READ 0") || !strings.Contains(all, "ERROR ")):
				t.Errorf("a KIP-848 Java consumer beside the workers: %q, want it refused, having read nothing", said)
			case protocol == "classic" && !strings.Contains(all, "ERROR SchemaException"):
				t.Errorf("a classic Java consumer beside the workers: %q, want it failing on the workers' subscription", said)
			}
			e.waitRows(t, 2*n, 90*time.Second)
			e.waitCommitted(t, 60*time.Second)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			expectRows(t, e.rowsPerEvent(t), 2*n, "j")
			e.expectNoDeadLetters(t)
		})
	}
}
