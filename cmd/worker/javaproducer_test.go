package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// Producers no one here wrote: Apache Kafka's own Java client, run from
// testdata/java/RealProducer.java against the broker's jars.

// javaLib returns the Kafka jars RealProducer.java runs with, skipping the
// test when they or java are missing.
func javaLib(t *testing.T) string {
	t.Helper()
	lib := os.Getenv("TESTENV_KAFKA_LIB")
	if lib == "" {
		t.Skip("needs the Kafka jars of scripts/services.sh (TESTENV_KAFKA_LIB; make test runs it)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("needs java (17 or later) to run testdata/java/RealProducer.java:", err)
	}
	return lib
}

// java is RealProducer.java producing to the env's topic in mode.
func (e *env) java(t *testing.T, ctx context.Context, lib, mode string, n int) *exec.Cmd {
	t.Helper()
	src, err := filepath.Abs("testdata/java/RealProducer.java")
	if err != nil {
		t.Fatal(err)
	}
	return exec.CommandContext(ctx, "java", "-Xmx256m", "-cp", lib+"/*", src, strings.Join(e.brokers, ","), e.topic, mode, strconv.Itoa(n))
}

// runJava runs RealProducer.java in mode to its end.
func (e *env) runJava(t *testing.T, lib, mode string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := e.java(t, ctx, lib, mode, n).CombinedOutput(); err != nil {
		t.Fatalf("RealProducer.java %s: %v\n%s", mode, err, out)
	}
}

// rowsPerEvent counts the table's rows by event id, and fails for a row
// holding more than one version of a cell: each event lands once.
func (e *env) rowsPerEvent(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for key, r := range e.rows(t) {
		out[key[strings.LastIndexByte(key, '#')+1:]]++
		for col, cells := range cellsOf(r) {
			if len(cells) != 1 {
				t.Errorf("row %s: %d versions of %s, want 1", key, len(cells), col)
			}
		}
	}
	return out
}

// expectRows fails unless the rows are exactly one for each event id
// prefix-0 .. prefix-(n-1) of every prefix, and none other.
func expectRows(t *testing.T, rows map[string]int, n int, prefixes ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range prefixes {
		for i := range n {
			want[fmt.Sprintf("%s-%d", p, i)] = true
		}
	}
	bad := 0
	for id, c := range rows {
		if !want[id] || c != 1 {
			if bad++; bad <= 10 {
				t.Errorf("event %s: %d rows, want %d", id, c, map[bool]int{true: 1}[want[id]])
			}
		}
	}
	for id := range want {
		if rows[id] == 0 {
			if bad++; bad <= 10 {
				t.Errorf("event %s: no row", id)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d events wrong in all", bad)
	}
}

// expectNoDeadLetters fails if anything reached the dead-letter topic.
func (e *env) expectNoDeadLetters(t *testing.T) {
	t.Helper()
	if _, end := testenv.Offsets(t, e.brokers, e.group, e.topic+".dlq", 1); end[0] != 0 {
		t.Errorf("%d dead letters, want none", end[0])
	}
}

// partitionStatus reads partition id's entry of the worker's /status.
func partitionStatus(t *testing.T, base string, id int) (lag, committed, lastStable, unstable int64) {
	t.Helper()
	_, body := testenv.MustGet(t, base+"/status")
	var st struct {
		Kafka struct {
			Partitions []struct {
				Partition   int   `json:"partition"`
				Lag         int64 `json:"lag"`
				Committed   int64 `json:"committed"`
				LastStable  int64 `json:"last_stable_offset"`
				UnstableLag int64 `json:"unstable_lag"`
			} `json:"partitions"`
		} `json:"kafka"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	for _, p := range st.Kafka.Partitions {
		if p.Partition == id {
			return p.Lag, p.Committed, p.LastStable, p.UnstableLag
		}
	}
	return -1, -1, -1, -1
}

// Committed transactions only: Kafka's Java producer, transactional, commits 300 events,
// aborts 300, commits 300: only the committed ones have rows, once each;
// none is dead-lettered, and every offset is committed (the markers' and
// the aborted records' too). Then a transaction left open on partition 0,
// with events outside transactions after it: the worker reads up to it and
// no further (no row of either) while /status and the metrics show the
// held-back records as unstable lag, its lag and committed offset at the
// last stable offset; once the transaction commits, all of them land.
func TestJavaProducerTransactions(t *testing.T) {
	testenv.BrokerVersionMatters(t, "transactions as that version's broker and producer write them")
	t.Parallel()
	lib := javaLib(t)
	e := newEnv(t, tenantsYAML)
	if out, err := e.cmd(t, "setup"); err != nil {
		t.Fatalf("setup: %v\n%s", err, out)
	}
	const n, k = 300, 40
	stop, logs := e.startWorker(t)
	e.runJava(t, lib, "transactions", n)
	e.waitRows(t, 2*n, 60*time.Second)
	e.waitCommitted(t, 30*time.Second)
	base := adminURL(t, logs)
	_, metrics := testenv.MustGet(t, base+"/metrics")
	if v, _ := metricValue(metrics, "cellttl_kafka_aborted_records_total"); v != n {
		t.Errorf("cellttl_kafka_aborted_records_total %v, want %d", v, n)
	}

	release := e.openTransaction(t, lib, k)
	testenv.Eventually(t, 30*time.Second, func() (bool, string) {
		lag, committed, lso, unstable := partitionStatus(t, base, 0)
		return lag == 0 && unstable == 2*k && committed == lso && lso > 0,
			fmt.Sprintf("partition 0: lag %d, committed %d, last stable offset %d, unstable lag %d; want lag 0, committed at the last stable offset, unstable lag %d", lag, committed, lso, unstable, 2*k)
	})
	_, metrics = testenv.MustGet(t, base+"/metrics")
	if v, _ := metricValue(metrics, "cellttl_kafka_consumer_unstable_lag", `messaging_destination_partition_id="0"`); v != 2*k {
		t.Errorf("cellttl_kafka_consumer_unstable_lag of partition 0: %v, want %d", v, 2*k)
	}
	time.Sleep(time.Second) // what a worker that read past it would have written by now
	for id, c := range e.rowsPerEvent(t) {
		if strings.HasPrefix(id, "open-") || strings.HasPrefix(id, "after-") {
			t.Errorf("event %s written (%d rows) while the transaction before it is open", id, c)
		}
	}
	release("commit")
	e.waitRows(t, 2*n+2*k, 60*time.Second)
	e.waitCommitted(t, 30*time.Second)
	if lag, _, _, unstable := partitionStatus(t, base, 0); unstable != 0 || lag != 0 {
		t.Errorf("after the commit, partition 0: lag %d, unstable lag %d; want 0 and 0", lag, unstable)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows, held := e.rowsPerEvent(t), map[string]int{}
	for id, c := range rows {
		if strings.HasPrefix(id, "open-") || strings.HasPrefix(id, "after-") {
			held[id] = c
			delete(rows, id)
		}
	}
	expectRows(t, rows, n, "c1", "c2")
	expectRows(t, held, k, "open", "after")
	e.expectNoDeadLetters(t)
}

// openTransaction starts RealProducer.java's open mode: a transaction of k
// events left open on partition 0, then k events after it, and returns
// once both are in the log; release ends the transaction ("commit", or
// abort) and waits for the program's end.
func (e *env) openTransaction(t *testing.T, lib string, k int) (release func(outcome string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := e.java(t, ctx, lib, "open", k)
	stdin, err1 := cmd.StdinPipe()
	stdout, err2 := cmd.StdoutPipe()
	stderr := &testenv.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err1 != nil || err2 != nil || err != nil {
		t.Fatalf("RealProducer.java open: %v %v %v", err1, err2, err)
	}
	lines := bufio.NewScanner(stdout)
	expect := func(what string) {
		if !lines.Scan() || lines.Text() != what {
			cancel()
			_ = cmd.Wait()
			t.Fatalf("RealProducer.java open: %q, want %s\n%s", lines.Text(), what, stderr.String())
		}
	}
	expect("OPEN")
	done := false
	release = func(outcome string) {
		if done {
			return
		}
		done = true
		defer cancel()
		_, _ = io.WriteString(stdin, outcome+"\n")
		expect("DONE")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("RealProducer.java open: %v\n%s", err, stderr.String())
		}
	}
	t.Cleanup(func() { release("abort") })
	return release
}
