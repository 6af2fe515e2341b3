package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/testkit/testenv"
)

// env is one test's slice of the services: its own topic, group and table.
type env struct {
	brokers []string
	// workerBrokers, when set, are what the worker connects to (a SASL
	// listener); the test itself uses brokers.
	workerBrokers []string
	topic, group  string
	table         string
	tenantsFile   string
	dc            *bigtable.Client
	ac            *bigtable.AdminClient
}

const partitions = 3

func newEnv(t *testing.T, tenantsYAML string) *env {
	t.Helper()
	e := &env{
		brokers: testenv.Kafka(t),
		topic:   testenv.Name("clicks"),
		group:   testenv.Name("group"),
		table:   testenv.Name("table"),
	}
	e.dc, e.ac = testenv.Clients(t)
	testenv.CreateTopic(t, e.brokers, e.topic, partitions)
	testenv.CreateTopicWith(t, e.brokers, e.topic+".dlq", 1, testenv.DeadLetterConfigs)
	e.tenantsFile = filepath.Join(t.TempDir(), "tenants.yaml")
	e.writeTenants(t, tenantsYAML)
	t.Cleanup(func() {
		_ = e.ac.DeleteTable(context.Background(), e.table)
		_ = e.ac.DeleteTable(context.Background(), e.table+"-erasures")
	})
	return e
}

func (e *env) writeTenants(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(e.tenantsFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// args are the flags every command of the test needs.
func (e *env) args(cmd string, extra ...string) []string {
	a := []string{cmd, "--table", e.table, "--tenants", e.tenantsFile, "--log-format", "text"}
	if cmd == "run" {
		brokers := e.brokers
		if e.workerBrokers != nil {
			brokers = e.workerBrokers
		}
		a = append(a, "--brokers", strings.Join(brokers, ","), "--topic", e.topic, "--group", e.group,
			"--flush-interval", "20ms", "--commit-interval", "100ms", "--admin-addr", "127.0.0.1:0", "--readiness-interval", "100ms")
	}
	if cmd == "forget" || cmd == "offboard" {
		// The topics' retention decides how long the ledger record lives,
		// and what the receipt says of them.
		a = append(a, "--brokers", strings.Join(e.brokers, ","), "--topic", e.topic)
	}
	return append(a, extra...)
}

// cmd runs a worker command in-process and returns its stdout and error.
// It gets commandTimeout: a command that waits for good (on a registry, a
// broker) fails its test with what it said, not the whole binary at go
// test's timeout with nothing.
func (e *env) cmd(t *testing.T, cmd string, extra ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	err := run(ctx, e.args(cmd, extra...), &out, &errOut)
	return out.String() + errOut.String(), err
}

// commandTimeout bounds each command a test runs to its end, in-process
// or a producer of another client.
const commandTimeout = 3 * time.Minute

// syncBuffer is shared by a logger and the test.
type syncBuffer = testenv.Buffer

// startWorker runs `worker run` in-process until the returned stop is
// called; stop returns run's error.
func (e *env) startWorker(t *testing.T, extra ...string) (stop func() error, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, e.args("run", extra...), logs, logs) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				err = fmt.Errorf("worker did not stop within 60s")
			}
		})
		return err
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	return stop, logs
}

// rows reads every row of the table with every version of every cell of
// the event family (not the workers' record, in a family of its own).
func (e *env) rows(t *testing.T) map[string]bigtable.Row {
	t.Helper()
	out := map[string]bigtable.Row{}
	err := e.dc.Open(e.table).ReadRows(context.Background(), bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		out[r.Key()] = r
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("^c$")))
	if err != nil {
		t.Fatalf("read table: %v", err)
	}
	return out
}

func (e *env) waitRows(t *testing.T, n int, timeout time.Duration) map[string]bigtable.Row {
	t.Helper()
	var rows map[string]bigtable.Row
	testenv.Eventually(t, timeout, func() (bool, string) {
		rows = e.rows(t)
		return len(rows) >= n, fmt.Sprintf("%d rows, want %d", len(rows), n)
	})
	return rows
}

// waitCommitted waits until the group has committed every partition to its
// end offset.
func (e *env) waitCommitted(t *testing.T, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, func() (bool, string) {
		committed, end := testenv.Offsets(t, e.brokers, e.group, e.topic, partitions)
		if len(end) < partitions {
			// A topic just created again may be unknown to the broker
			// answering for a moment: no answer is no end (a run took an
			// empty answer for "nothing to commit" and stopped the worker
			// before it had a partition).
			return false, fmt.Sprintf("the end offsets of %s are not all known yet: %v", e.topic, end)
		}
		for p, o := range end {
			if o < 0 {
				return false, fmt.Sprintf("partition %d's end offset unknown yet: %v", p, end)
			}
			if committed[p] == o || o == 0 {
				continue
			}
			// A partition whose records the broker's retention has
			// deleted has nothing to commit either.
			if start := testenv.LogStarts(t, e.brokers, e.topic, partitions); start[p] == o && committed[p] < 0 {
				continue
			}
			return false, fmt.Sprintf("committed %v, end %v", committed, end)
		}
		return true, ""
	})
}

// cellsOf returns a row's cells by column.
func cellsOf(r bigtable.Row) map[string][]bigtable.ReadItem {
	out := map[string][]bigtable.ReadItem{}
	for _, items := range r {
		for _, it := range items {
			out[strings.TrimPrefix(it.Column, "c:")] = append(out[strings.TrimPrefix(it.Column, "c:")], it)
		}
	}
	return out
}

// tenantsFileCopy copies the current tenants file to path.
func (e *env) tenantsFileCopy(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(e.tenantsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
