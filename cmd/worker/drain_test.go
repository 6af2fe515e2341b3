package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Events produced by Kafka's own console producer, a client independent of
// the worker's, land per the contract.
func TestIndependentProducer(t *testing.T) {
	testenv.BrokerVersionMatters(t, "Kafka's own console producer, which moved between versions")
	t.Parallel()
	lib := os.Getenv("TESTENV_KAFKA_LIB")
	if lib == "" {
		t.Skip("needs the Kafka tools of scripts/services.sh (make test runs it)")
	}
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	lines := fmt.Sprintf(`{"event_id":"k-1","tenant_id":"acme","user_id":"u-42","occurred_at":%q}
{"event_id":"k-2","tenant_id":"globex","occurred_at":%q,"extra":{"nested":[1,2]}}
`, occurred.Format(time.RFC3339Nano), occurred.Format(time.RFC3339Nano))
	// Kafka 4 moved the console producer to the tools module.
	class := "org.apache.kafka.tools.ConsoleProducer"
	if strings.HasPrefix(os.Getenv("TESTENV_KAFKA_VERSION"), "3.") {
		class = "kafka.tools.ConsoleProducer"
	}
	cmd := exec.Command("java", "-cp", lib+"/*", class, "--bootstrap-server", e.brokers[0], "--topic", e.topic)
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("console producer: %v\n%s", err, out)
	}
	stop, _ := e.startWorker(t)
	rows := e.waitRows(t, 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for key, r := range rows {
		tenant := key[:strings.IndexByte(key, '#')]
		ev := cellsOf(r)["event"]
		if len(ev) != 1 || int64(ev[0].Timestamp) != wantTimestamp(tenant, occurred) || !strings.Contains(lines, string(ev[0].Value)) {
			t.Errorf("row %s: %+v", key, ev)
		}
	}
}

func TestDrainOnStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	const n = 3000
	values := make([][]byte, n)
	for i := range values {
		values[i] = click{EventID: fmt.Sprintf("d-%d", i), TenantID: "globex", UserID: fmt.Sprintf("u-%d", i%50)}.bytes()
	}
	testenv.Produce(t, e.brokers, e.topic, values...)
	// A long flush interval: whatever is batched when the stop comes must be
	// flushed by the drain, not by the timer.
	stop, _ := e.startWorker(t, "--flush-interval", "1h", "--flush-rows", "50000", "--commit-interval", "1h")
	time.Sleep(2 * time.Second) // let it fetch into the open batch
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Every fetched event was written by the drain, and the commit covers
	// exactly those: per partition, offsets committed == rows written.
	written := eventIDs(e.rows(t))
	perPartition := map[int]int64{}
	for _, m := range testenv.ReadAll(t, e.brokers, e.topic, n, 20*time.Second) {
		var c click
		if err := json.Unmarshal(m.Value, &c); err != nil {
			t.Fatal(err)
		}
		if written[c.EventID] {
			perPartition[m.Partition]++
		}
	}
	committed, _ := testenv.Offsets(t, e.brokers, e.group, e.topic, partitions)
	total := int64(0)
	for p := 0; p < partitions; p++ {
		c := max(committed[p], 0)
		if c != perPartition[p] {
			t.Errorf("partition %d: committed %d, rows written %d", p, c, perPartition[p])
		}
		total += perPartition[p]
	}
	if total == 0 {
		t.Error("nothing written before the stop")
	}
	t.Logf("drained %d of %d events", total, n)
}

// eventIDs returns the event ids of rows, from the key's last part.
func eventIDs(rows map[string]bigtable.Row) map[string]bool {
	out := make(map[string]bool, len(rows))
	for key := range rows {
		out[key[strings.LastIndexByte(key, '#')+1:]] = true
	}
	return out
}
